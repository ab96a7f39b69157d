#!/usr/bin/env bash
# GPU check for the fast path: `rig bench` on one NVIDIA GPU, unattended, < 5 minutes.
#
# Runs outside Docker on a machine with an NVIDIA GPU and PyTorch, without network, from the
# repository root:   OUT=/some/dir tools/gpu_check_bench.sh
# It needs ultralytics==8.4.190 importable. If it is not, it installs wheels from $WHEELS
# (default .whl/), fetched beforehand on a machine with network, e.g.:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     ultralytics-opencv-headless==8.4.190 ultralytics-thop polars
# Results under $OUT: gpu.txt, bench-*.json (the `rig bench` JSON), bench-*.log, summary.txt.
# Each measure runs under its own timeout so one hang cannot eat the whole budget.
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

# name, timeout (s), rig bench arguments. The first generates the 1024-image dataset the rest reuse.
# 1024 images at batch 16: a 64-step real run, long enough for a GPU utilisation reading.
MEASURES=(
    "default-640|120|--train-images 1024"
    "noamp-640|50|--train-images 1024 --quick --no-amp"
    "nodeterministic-640|50|--train-images 1024 --quick --no-deterministic"
    "batch64-640|55|--train-images 1024 --quick --batch 64"
)
for m in "${MEASURES[@]}"; do
    IFS='|' read -r name limit args <<<"$m"
    log "bench $name: rig bench $args"
    # shellcheck disable=SC2086  # args are words
    timeout --kill-after=10 "$limit" "$PY" -m rig bench $args --json "$OUT/bench-$name.json" \
        >"$OUT/bench-$name.log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
        log "  FAILED rc=$rc: $(tail -n 1 "$OUT/bench-$name.log")"
        continue
    fi
    "$PY" - "$OUT/bench-$name.json" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
r = json.load(open(sys.argv[1]))
ld, t = r["loader"], r["train"] or {}
util = t.get("gpu_util_mean")
print(
    f"  loader stock {ld['stock_img_s']:.0f} img/s ({ld['stock']}), ours {ld['ours_img_s']:.0f} img/s "
    f"({ld['ours']}), x{ld['speedup']:.2f}; step {r['step_img_s']:.0f} img/s; "
    f"real run {t.get('img_s', 0):.0f} img/s, GPU util {util if util is None else round(util)}%, "
    f"data wait {t.get('data_wait_fraction', 0):.0%}; bottleneck {r['bottleneck']} on {r['device']}"
)
EOF
done
log "done"
