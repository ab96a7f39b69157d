#!/usr/bin/env bash
# GPU check for the train step: does the GPU ever wait? One prepared call of under 8 minutes on a lent
# one-GPU box (BUDGET_S, default 450 s: a part that would pass it is cut short or skipped, and says so).
#
# Runs outside Docker on a machine with an NVIDIA GPU, PyTorch and g++ (torch.compile's toolchain), its
# own newer torch, without network, from the repository root:   OUT=/some/dir tools/gpu_check_step.sh
# Ultralytics 8.4.190 comes from the wheels in $WHEELS (default .whl/) when it is not importable; fetch
# them beforehand on a machine with network (/work/.library/device/README.md says how):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     ultralytics-opencv-headless==8.4.190 ultralytics-thop ultralytics-platform polars polars-runtime-32
# `tools/gpu_check_step.sh --cpu-smoke` runs every part on the CPU with a tiny model at 64 px (no GPU, no
# timing worth reading): the plumbing, the JSON and the summary, minutes in the image.
#
# What it measures, YOLO11n then YOLO11s at 640 px, on the same generated 1280x720 frames, the most
# wanted first:
#   - `rig bench --parts step`: the train step eager and with each lever (channels_last, fused optimizer
#     kernels, CUDA graphs; YOLO11s without CUDA graphs, whose compile would not fit), the first 50
#     steps' losses of each against AMP's noise, at the batch `rig train` picks; the measurement is
#     recorded where `rig train` then reads it;
#   - `rig train` without batch= (its batch, loader and levers) against stock `yolo train` at the same
#     settings (Ultralytics' own trainer and defaults, timed by rig's telemetry through the same callbacks):
#     EPOCHS epochs of the same images each, close_mosaic=0 for both (mosaic on, as in most of a long
#     run); images/s and the GPU's busy share over the epochs after the first;
#   - YOLO11n's `rig train` again with RIG_MEASURED_LEVERS=0 (its batch, without the levers).
# Then the targets for YOLO11n: rig train >= 3x stock, >= 1500 img/s, GPU busy > 90 %.
# Results under $OUT (the device tool brings back 8 files): summary.txt, step.json (every figure and the
# targets), bench-<model>.json, gpu.txt, logs.tgz (every log). Exit 0 when every part that ran passed.
set -uo pipefail

OUT=${OUT:?set OUT to a directory for the results}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SMOKE=0
[ "${1:-}" = "--cpu-smoke" ] && SMOKE=1
WHEELS=${WHEELS:-.whl}
WORK=$(mktemp -d /tmp/rig-gpu-step.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

export PYTHONPATH="$PWD/entrypoint:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# As in the image: offline, our overlay, settings and caches in $WORK; telemetry every 0.25 s.
export YOLO_OFFLINE=true YOLO_AUTOINSTALL=false YOLO_CONFIG_DIR="$WORK/cfg" RIG_CONFIGS_DIR="$PWD/configs" \
    RIG_CACHE_DIR="$WORK/cache" RIG_STACK=${STACK:-cu121} RIG_TELEMETRY_INTERVAL=0.25 \
    TORCHINDUCTOR_CACHE_DIR="$WORK/cache/inductor" TRITON_CACHE_DIR="$WORK/cache/triton" \
    TORCHINDUCTOR_FX_GRAPH_CACHE=1

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }

{ nvidia-smi; nproc; free -g; "$PY" -c 'import torch; print("torch", torch.__version__)'; } >"$OUT/gpu.txt" 2>&1
if ! "$PY" -c 'import ultralytics' 2>/dev/null && compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "$WHEELS"/*.whl \
        && export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
if ! "$PY" -c 'import ultralytics, sys; print("ultralytics", ultralytics.__version__, file=sys.stderr)' 2>>"$OUT/gpu.txt"; then
    log "ERROR ultralytics is not importable; put its wheels in $WHEELS (see this script's header)"
    exit 1
fi
"$PY" -c 'from ultralytics.utils import SETTINGS; SETTINGS.update(datasets_dir="'"$WORK"'/datasets", runs_dir="'"$WORK"'/runs", sync=False)' \
    >>"$OUT/gpu.txt" 2>&1

if [ "$SMOKE" = 1 ]; then
    MODELS="tiny" IMGSZ=64 W=64 H=64 PER=8 EPOCHS=2 DEVICE=(device=cpu) BENCH=(--device cpu --equal-steps 3)
    DEADLINE=${BUDGET_S:-1500} SLOW=4 # each part's limit x SLOW: a CPU, maybe a busy one
    model_file() { echo tests/scripts/tiny_detect.yaml; }
else
    MODELS="yolo11n yolo11s" IMGSZ=640 W=1280 H=720 PER=256 EPOCHS=8 DEVICE=() BENCH=(--quick)
    DEADLINE=${BUDGET_S:-450} SLOW=1 # in the script's SECONDS: from its start
    model_file() { echo "$1.yaml"; }
fi
log "gpu_check_step: models $MODELS at $IMGSZ px, $EPOCHS epochs of $((4 * PER)) ${W}x${H} frames (smoke=$SMOKE)"

# The frames: four generators at once (the same seed: four copies of each frame, which no cache merges:
# every path is decoded and cached on its own), one data yaml over the four folders.
for i in 1 2 3 4; do
    "$PY" -m rig demo-data "$WORK/data/p$i" --train "$PER" --val 4 --imgsz "$W" --height "$H" >/dev/null 2>&1 &
done
wait
IMAGES=$((4 * PER))
DATA=$WORK/data/data.yaml
{
    echo "path: $WORK/data"
    echo "train: [p1/images/train, p2/images/train, p3/images/train, p4/images/train]"
    echo "val: p1/images/val"
    sed -n '/^names:/,$p' "$WORK/data/p1/data.yaml"
} >"$DATA"
mkdir -p "$WORK/logs" "$WORK/runs"
rc=0

within_budget() { # name limit log command...: 1 when skipped or failed
    local name=$1 limit=$(($2 * SLOW)) logf=$3 left=$((DEADLINE - SECONDS))
    shift 3
    if [ "$left" -lt 30 ]; then
        log "  SKIPPED $name: ${left}s left of the budget"
        return 1
    fi
    log "$name (limit $((limit < left ? limit : left)) s)"
    timeout --kill-after=10 "$((limit < left ? limit : left))" "$@" >"$logf" 2>&1
    local r=$?
    [ "$r" -eq 0 ] || { log "  FAILED $name rc=$r: $(tail -n 1 "$logf")"; rc=1; }
    return "$r"
}

bench() { # model limit [levers]
    local m=$1 limit=$2 levers=${3:-channels_last,fused_optimizer,cuda_graphs}
    within_budget "bench-$m" "$limit" "$WORK/logs/bench-$m.log" "$PY" -m rig bench --model "$(model_file "$m")" \
        --imgsz "$IMGSZ" --parts step --levers "$levers" --data "$DATA" "${BENCH[@]}" --json "$OUT/bench-$m.json"
    grep -E "^(measure|  with|train step|batch:|levers:)" "$WORK/logs/bench-$m.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
}

TRAIN_ARGS=(data="$DATA" epochs="$EPOCHS" imgsz="$IMGSZ" val=False plots=False close_mosaic=0 exist_ok=True
    project="$WORK/runs" "${DEVICE[@]}")
ours() { # model limit name [env...]: rig train without batch=
    local m=$1 limit=$2 name=$3
    shift 3
    within_budget "$name" "$limit" "$WORK/logs/$name.log" env "$@" "$PY" -m rig train \
        model="$(model_file "$m")" name="$name" "${TRAIN_ARGS[@]}"
    grep -E "^INFO launch: (batch|channels_last|cuda_graphs|fused_optimizer|workers|cache)" "$WORK/logs/$name.log" \
        | sed 's/^/  /' | tee -a "$OUT/summary.txt"
}
stock() { # model limit: yolo train as its CLI runs it, timed by telemetry
    local m=$1 limit=$2
    within_budget "stock-$m" "$limit" "$WORK/logs/stock-$m.log" "$PY" tools/gpu_check_step.py stock-train \
        model="$(model_file "$m")" name="stock-$m" "${TRAIN_ARGS[@]}"
}

first=${MODELS%% *}
last=${MODELS##* }
bench "$first" 240
ours "$first" 80 "ours-$first"
stock "$first" 80
if [ "$last" != "$first" ]; then
    ours "$last" 70 "ours-$last"
    stock "$last" 90
    bench "$last" 70 channels_last,fused_optimizer
fi
ours "$first" 60 "nolevers-$first" RIG_MEASURED_LEVERS=0

log "summary"
"$PY" tools/gpu_check_step.py summarize "$OUT" "$WORK" "$IMAGES" 2>&1 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
find "$WORK/runs" -name '*.pt' -delete
for d in "$WORK"/runs/*/; do cp "$d/telemetry.csv" "$WORK/logs/$(basename "$d").telemetry.csv" 2>/dev/null; done
tar czf "$OUT/logs.tgz" -C "$WORK" logs
log "done rc=$rc"
exit "$rc"
