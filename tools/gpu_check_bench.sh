#!/usr/bin/env bash
# GPU check for the fast path: `rig bench` and short `rig train` runs on NVIDIA GPUs, unattended,
# under 8 minutes in all (BUDGET_S, default 450 s: a measure that would pass it is cut short or
# skipped, and says so).
#
# Runs outside Docker on a machine with an NVIDIA GPU, PyTorch and g++ (torch.compile's toolchain),
# without network, from the repository root:   OUT=/some/dir tools/gpu_check_bench.sh
# It needs ultralytics==8.4.190 importable. If it is not, it installs wheels from $WHEELS
# (default .whl/), fetched beforehand on a machine with network, e.g.:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     ultralytics-opencv-headless==8.4.190 ultralytics-thop polars
# What it measures, YOLO11n at 640 px, the most wanted first:
#   - the train step eager with AMP, compiled (--compile: compile time with an empty kernel cache),
#     eager in fp32 (--no-amp);
#   - epoch times of `rig train`, 3 epochs of 1024 images at batch 16: AMP, compile=True (epoch 1
#     holds the compile, epochs 2-3 are the steady state), fp32;
#   - with two GPUs or more: 2 ranks, 8 images per GPU, sync_bn=False against sync_bn=True;
#   - the compiled step again with the kernel cache kept (the second run's compile time);
#   - the earlier checks: --no-deterministic, --batch 64.
# Results under $OUT: gpu.txt, bench-*.json (the `rig bench` JSON), bench-*.log, train-*.log,
# runs/*/results.csv, summary.txt.
set -uo pipefail

OUT=${OUT:?set OUT to a directory for the results}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# STACK (cu121, the default, or cu128): the yolo-rig stack this machine's torch stands in for.
# rig reads it as RIG_STACK (rig doctor's driver minimum and kernel table); the lock's versions for it
# are logged beside the torch installed here.
export RIG_STACK=${STACK:-cu121}
WHEELS=${WHEELS:-.whl}
WORK=$(mktemp -d /tmp/rig-gpu-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

export PYTHONPATH="$PWD/entrypoint${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# As in the image: offline, our overlay, settings in a scratch config dir, datasets in $WORK.
export YOLO_OFFLINE=true YOLO_AUTOINSTALL=false YOLO_CONFIG_DIR="$WORK/cfg" RIG_CONFIGS_DIR="$PWD/configs"

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/summary.txt"; }

{ nvidia-smi; nproc; free -g; echo "stack $RIG_STACK, lock:" $(python3 tools/lock_versions.py uv.lock "$RIG_STACK"); } >"$OUT/gpu.txt" 2>&1
if ! "$PY" -c 'import ultralytics' 2>/dev/null; then
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$WHEELS"/*.whl \
            && export PYTHONPATH="$PYTHONPATH:$WORK/site"
    fi
fi
if ! "$PY" -c 'import ultralytics, sys; print("ultralytics", ultralytics.__version__, file=sys.stderr)' 2>>"$OUT/gpu.txt"; then
    log "ERROR ultralytics is not importable; put its wheels in $WHEELS (see this script's header)"
    exit 1
fi
"$PY" -c 'from ultralytics.utils import SETTINGS; SETTINGS.update(datasets_dir="'"$WORK"'/datasets", runs_dir="'"$WORK"'/runs", sync=False)' \
    >>"$OUT/gpu.txt" 2>&1

# Kernels compiled here stay here (the first compile measure starts from an empty cache), kept as
# the image keeps them.
export TORCHINDUCTOR_CACHE_DIR="$WORK/cache/inductor" TRITON_CACHE_DIR="$WORK/cache/triton" \
    TORCHINDUCTOR_FX_GRAPH_CACHE=1
DEADLINE=${BUDGET_S:-450} # in the script's SECONDS: from its start

# Runs the command under the measure's limit, cut to what is left of the budget; 1 when skipped or failed.
within_budget() { # name limit log command...
    local name=$1 limit=$2 logf=$3 left=$((DEADLINE - SECONDS))
    shift 3
    if [ "$left" -lt 30 ]; then
        log "  SKIPPED $name: ${left}s left of the budget"
        return 1
    fi
    timeout --kill-after=10 "$((limit < left ? limit : left))" "$@" >"$logf" 2>&1
    local rc=$?
    [ "$rc" -eq 0 ] || log "  FAILED $name rc=$rc: $(tail -n 1 "$logf")"
    return "$rc"
}

# As this check measured before `rig bench` grew the levers and the stock run (tools/gpu_check_step.sh
# measures those): Ultralytics' batch 16 unless given, the eager step, ours' real run.
BENCH_AS_BEFORE="--batch 16 --no-levers --parts loader,tail,step,run"
bench() { # name limit rig-bench-arguments (a later --batch wins)
    local name=$1 limit=$2 args="$BENCH_AS_BEFORE $3"
    log "bench $name: rig bench $args"
    # shellcheck disable=SC2086  # args are words
    within_budget "$name" "$limit" "$OUT/bench-$name.log" \
        "$PY" -m rig bench $args --json "$OUT/bench-$name.json" || return 0
    "$PY" - "$OUT/bench-$name.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
from rig.observe.bench.results import rate
r = json.load(open(sys.argv[1]))
ld, t = r["loader"], r["train"] or {}
util = t.get("gpu_util_mean")
print(
    f"  loader stock {rate(ld['stock_img_s'])} img/s ({ld['stock']}), ours {rate(ld['ours_img_s'])} img/s "
    f"({ld['ours']}), x{ld['speedup']:.2f}; step eager {rate(r['step_eager_img_s'])} img/s "
    f"(amp {r['amp_used']}); real run {rate(t.get('img_s', 0))} img/s, GPU util "
    f"{util if util is None else round(util)}%, data wait {t.get('data_wait_fraction', 0):.0%}; "
    f"bottleneck {r['bottleneck']} on {r['device']}"
)
if r["compile_used"]:
    print(
        f"  step compiled {rate(r['step_compiled_img_s'])} img/s "
        f"(x{r['step_compiled_img_s'] / r['step_eager_img_s']:.2f} eager), first step {r['compile_s']:.1f} s"
    )
elif r["compile_note"]:
    print(f"  compile not used: {r['compile_note']}")
EOF
}

DATA=$WORK/datasets/.rig-bench/shapes-1024-1280x720/data.yaml # generated by the first bench
train() { # name limit gpus rig-train-arguments
    local name=$1 limit=$2 gpus=$3 args=$4
    log "train $name: rig train --gpus $gpus $args"
    # shellcheck disable=SC2086  # args are words
    within_budget "$name" "$limit" "$OUT/train-$name.log" \
        "$PY" -m rig train --gpus "$gpus" data="$DATA" model=yolo11n.yaml epochs=3 imgsz=640 \
        plots=False project="$OUT/runs" name="$name" exist_ok=True $args || return 0
    "$PY" - "$OUT/runs/$name/results.csv" <<'EOF' | tee -a "$OUT/summary.txt"
import csv, sys
ends = [float(r["time"]) for r in csv.DictReader(open(sys.argv[1]))]
epochs = [round(b - a, 1) for a, b in zip([0.0, *ends], ends)]
print(f"  epoch times (s): {epochs} (epoch 1 holds any compile; steady {min(epochs[1:] or epochs)} s)")
EOF
    grep -h -m 1 "INFO trainer: sync_bn" "$OUT/train-$name.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    rm -rf "$OUT/runs/$name/weights" # the timings are the result, not the weights
}

bench default-640 120 "--train-images 1024"
bench compile-640 200 "--train-images 1024 --quick --compile"
bench noamp-640 50 "--train-images 1024 --quick --no-amp"
train amp 90 1 "batch=16 amp=True"
train compile 200 1 "batch=16 amp=True compile=True"
train fp32 90 1 "batch=16 amp=False"
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
    train syncbn-off 90 2 "batch=16 sync_bn=False"
    train syncbn-on 90 2 "batch=16 sync_bn=True"
else
    log "sync_bn: one GPU here; sync_bn on against off needs two"
fi
bench compile-again-640 120 "--train-images 1024 --quick --compile" # the second run: the cache's kernels
bench nodeterministic-640 50 "--train-images 1024 --quick --no-deterministic"
bench batch64-640 55 "--train-images 1024 --quick --batch 64"
log "done"
