#!/usr/bin/env bash
# GPU check for the augmentation's pixel work on the device (rig.yolo.device_augment: mosaic, the
# affine warp, colour and layout), unattended, within
# BUDGET_S (default 540 s; a measure that would pass it is cut short or skipped, and says so).
#
# Runs outside Docker on a machine with an NVIDIA GPU and PyTorch, without network, from the
# repository root:   OUT=/some/dir tools/gpu_check_augment.sh
# Ultralytics 8.4.190 comes from $WHEELS as for tools/gpu_check_bench.sh (see its header; here also
# ultralytics-platform and polars-runtime-32).
# What it measures, the most wanted first:
#   - equality on CUDA: Ultralytics' Mosaic canvas + RandomPerspective (OpenCV's warpAffine and
#     warpPerspective) against the device warp over drawn matrices (every pixel, to the level);
#     RandomHSV + Format against the device tail on synthetic images; real training batches (same
#     seeds; node image cache, two workers): labels equal, and without HSV every pixel equal (a
#     detection and a segmentation dataset, rotation, shear, perspective);
#   - the device tail per batch on CUDA (synchronised), colour alone and with the geometry (2x2
#     mosaics of 16:9 frames): batch 16 and 64 at 640 px, 16 at 1280 px;
#   - val mAP, `rig train` with and without it (RIG_DEVICE_AUGMENT=0), seeds 0 and 1: the noise is
#     the spread between seeds;
#   - compile=True with AMP and it on (one epoch: it trains and validates);
#   - `rig bench --quick` (1280x720 frames): the loader stock against ours, loader.device_tail_ms_per_image
#     on the GPU, the real run's GPU utilisation and data wait.
# PARTS (default "probes map compile bench") picks the measures; EPOCHS (default 10) the mAP runs' length.
# Results under $OUT: gpu.txt, probes.txt, bench-*.json/log, train-*.log, map.txt, summary.txt.
set -uo pipefail

OUT=${OUT:?set OUT to a directory for the results}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=${DEVICE:-cuda:0}
WHEELS=${WHEELS:-.whl}
WORK=$(mktemp -d /tmp/rig-gpu-augment.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

export PYTHONPATH="$PWD/entrypoint${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export YOLO_OFFLINE=true YOLO_AUTOINSTALL=false YOLO_CONFIG_DIR="$WORK/cfg" RIG_CONFIGS_DIR="$PWD/configs" \
    RIG_CACHE_DIR="$WORK/cache" RIG_STACK=${STACK:-cu121}

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }

{ nvidia-smi; nproc; free -g; } >"$OUT/gpu.txt" 2>&1
if ! "$PY" -c 'import ultralytics' 2>/dev/null && compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WHEELS"/*.whl \
        && export PYTHONPATH="$PYTHONPATH:$WORK/site"
fi
# The device warp reproduces OpenCV 4.11's arithmetic (the image's): the equality is against this OpenCV.
if ! "$PY" -c 'import ultralytics, cv2, torch, sys; print("ultralytics", ultralytics.__version__, "opencv", cv2.__version__,
    "torch", torch.__version__, file=sys.stderr)' 2>>"$OUT/gpu.txt"; then
    log "ERROR ultralytics is not importable; put its wheels in $WHEELS (see this script's header)"
    exit 1
fi
"$PY" -c 'from ultralytics.utils import SETTINGS; SETTINGS.update(datasets_dir="'"$WORK"'/datasets", runs_dir="'"$WORK"'/runs", sync=False)' \
    >>"$OUT/gpu.txt" 2>&1
DEADLINE=${BUDGET_S:-540}
PARTS=" ${PARTS:-probes map compile bench} "
EPOCHS=${EPOCHS:-10}
wanted() { [[ $PARTS == *" $1 "* ]]; }

within_budget() { # name limit log command...
    local name=$1 limit=$2 logf=$3 left=$((DEADLINE - SECONDS))
    shift 3
    if [ "$left" -lt 20 ]; then
        log "  SKIPPED $name: ${left}s left of the budget"
        return 1
    fi
    timeout --kill-after=10 "$((limit < left ? limit : left))" "$@" >"$logf" 2>&1
    local rc=$?
    [ "$rc" -eq 0 ] || log "  FAILED $name rc=$rc: $(tail -n 1 "$logf")"
    return "$rc"
}

PROBE="$PY tests/scripts/device_augment_probe.py"
if wanted probes; then
    log "probes on $DEV"
    "$PY" -m rig demo-data "$WORK/d" --train 24 --val 4 --imgsz 200 --height 120 >/dev/null 2>&1
    NO_HSV=hsv_h=0,hsv_s=0,hsv_v=0
    within_budget probes 150 "$OUT/probes.log" bash -c "
        $PROBE warp $DEV torch && $PROBE synthetic $DEV torch && $PROBE batches $WORK/d/data.yaml $DEV ram 2 torch &&
        $PROBE batches $WORK/d/data.yaml $DEV ram 2 torch $NO_HSV,degrees=10,shear=5,perspective=5e-4 &&
        $PROBE segments $WORK/d/data.yaml $WORK/s && $PROBE batches $WORK/s/data.yaml $DEV none 2 torch $NO_HSV,task=segment &&
        $PROBE tail $DEV 16 640 && $PROBE tail $DEV 64 640 && $PROBE tail $DEV 16 1280"
    grep '^PROBE' "$OUT/probes.log" | tee "$OUT/probes.txt" | "$PY" -c '
import json, sys
for line in sys.stdin:  # one short line per probe: what the verdict needs
    p = json.loads(line[6:])
    keys = ("mode", "moved", "hyp", "kernels", "images", "cases", "labels_equal", "exact", "over1", "max",
            "batch", "imgsz", "ms_per_image", "peak_gib")
    print(" ", {k: p[k] for k in keys if k in p and k != "cases"})' | tee -a "$OUT/summary.txt"
fi

wanted map || wanted compile && "$PY" -m rig demo-data "$WORK/map" --train 256 --val 64 --imgsz 320 >/dev/null 2>&1
train() { # name limit env rig-train-arguments
    local name=$1 limit=$2 env=$3 args=$4
    log "train $name: $env rig train --gpus 1 $args"
    # shellcheck disable=SC2086  # env and args are words
    within_budget "$name" "$limit" "$OUT/train-$name.log" env $env "$PY" -m rig train --gpus 1 \
        data="$WORK/map/data.yaml" model=yolo11n.yaml imgsz=320 batch=16 plots=False \
        project="$WORK/runs" name="$name" exist_ok=True $args || return 0
    grep -h -m 1 "INFO trainer: device augment" "$OUT/train-$name.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    "$PY" - "$WORK/runs/$name/results.csv" "$name" <<'EOF' | tee -a "$OUT/summary.txt" "$OUT/map.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
last = {k.strip(): v for k, v in rows[-1].items()}
print(f"  {sys.argv[2]}: epochs {len(rows)}, mAP50-95 {float(last['metrics/mAP50-95(B)']):.4f}, "
      f"mAP50 {float(last['metrics/mAP50(B)']):.4f}, time {float(last['time']):.1f} s")
EOF
}
if wanted map; then
    for seed in 0 1; do
        train "ours-s$seed" 80 "RIG_DEVICE_AUGMENT=1" "epochs=$EPOCHS seed=$seed workers=8"
        train "stock-s$seed" 80 "RIG_DEVICE_AUGMENT=0" "epochs=$EPOCHS seed=$seed workers=8"
    done
fi
wanted compile && train compile-amp 150 "RIG_DEVICE_AUGMENT=1" "epochs=1 amp=True compile=True workers=8"

wanted bench && log "bench: rig bench --quick --ranks 0 --train-images 512 (1280x720 frames)"
if wanted bench && within_budget bench 150 "$OUT/bench-720p.log" "$PY" -m rig bench --quick --ranks 0 --train-images 512 \
    --json "$OUT/bench-720p.json"; then
    "$PY" - "$OUT/bench-720p.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
ld, t = r["loader"], r["train"] or {}
print(
    f"  loader stock {ld['stock_img_s']:.0f} img/s, ours {ld['ours_img_s']:.0f} img/s (x{ld['speedup']:.2f}), "
    f"device tail {ld['device_tail_ms_per_image']} ms/image on {r['device']}, ours + tail "
    f"{ld['ours_with_tail_img_s']:.0f} img/s; real run {t.get('img_s', 0):.0f} img/s, GPU util "
    f"{t.get('gpu_util_mean')}, data wait {t.get('data_wait_fraction', 0):.0%}"
)
EOF
fi

log "done"
