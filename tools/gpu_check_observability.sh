#!/usr/bin/env bash
# GPU check for observability on a lent NVIDIA machine: no Docker, PyTorch preinstalled,
# no network. Unattended, about 2-4 minutes. Writes under $OUT (at most 8 files):
#   checks.txt                 PASS/FAIL per expectation, last line the totals
#   run.log                    everything printed, nvidia-smi first
#   doctor.txt, doctor.json    `rig doctor` on this machine, then with --data on generated demo data
#   telemetry_fast.csv, telemetry_starved.csv, telemetry_summaries.json
#                              two short real GPU runs (GPU-bound, then loader-starved) under telemetry
# Exit status: 0 when every check passed.
# The YOLO run needs ultralytics: carry its wheels in .whl/ (see the device README) to include it.
# One GPU shows everything here: no check needs two.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d /tmp/rig-obs-out.XXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
# STACK (cu121, the default, or cu128): the yolo-rig stack this machine's torch stands in for.
# rig reads it as RIG_STACK (rig doctor's driver minimum and kernel table); the lock's versions for it
# are logged beside the torch installed here.
export RIG_STACK=${STACK:-cu121}
export PYTHONPATH="$PWD/entrypoint${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 RIG_TELEMETRY_INTERVAL=1
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
exec > >(tee "$OUT/run.log") 2>&1
checks="$OUT/checks.txt"
: >"$checks"
pass() { echo "PASS $*" | tee -a "$checks"; }
fail() { echo "FAIL $*" | tee -a "$checks"; }

echo "== nvidia-smi"
timeout 60 nvidia-smi || echo "nvidia-smi failed"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch._C._cuda_getArchFlags())'
echo "stack $RIG_STACK, lock:" $(python3 tools/lock_versions.py uv.lock "$RIG_STACK")

echo "== rig doctor"
timeout 120 "$PY" -m rig doctor >"$OUT/doctor.txt" 2>&1
rc=$?
cat "$OUT/doctor.txt"
timeout 120 "$PY" -m rig doctor --json >"$OUT/doctor.json"
[[ $rc == 0 || $rc == 1 ]] && pass "rig doctor ran (exit $rc)" || fail "rig doctor crashed (exit $rc)"
"$PY" - "$OUT/doctor.json" <<'PY' | tee -a "$checks"
import json, sys
checks = {c["name"]: c for c in json.load(open(sys.argv[1]))["checks"]}
for name in ("driver", "gpus", "kernels"):  # kernels: NVML's compute capability vs this torch's arch list
    c = checks[name]
    print(f"{'PASS' if c['status'] == 'pass' else 'FAIL'} doctor {name}: {c['status']}: {c['detail']}")
for c in checks.values():
    print(f"INFO doctor {c['name']}: {c['status']}: {c['detail']}")
PY

echo "== demo data, rig doctor --data"
demo=/tmp/rig-obs-demo
rm -rf "$demo"
if timeout 120 "$PY" -m rig demo-data "$demo" --train 256 --val 32; then
  data="$demo/data.yaml"
  { echo; echo "\$ rig doctor --data $data"; timeout 120 "$PY" -m rig doctor --data "$data"; } >>"$OUT/doctor.txt" 2>&1
  grep -q '^pass  dataset' "$OUT/doctor.txt" && pass "doctor --data: dataset readable" \
    || fail "doctor --data: dataset check did not pass (see doctor.txt)"
else
  data=""
  fail "rig demo-data failed: no dataset for doctor --data or the YOLO run"
fi

echo "== telemetry runs"
timeout 420 "$PY" tools/gpu_check_observability.py "$OUT" ${data:+"$data"} | tee /tmp/rig-obs-workload.log
rc=$?
grep -E '^(PASS|FAIL) ' /tmp/rig-obs-workload.log >>"$checks"
[[ $rc == 0 ]] || fail "telemetry workload exited $rc"

npass=$(grep -c '^PASS' "$checks"); nfail=$(grep -c '^FAIL' "$checks")
echo "$npass passed, $nfail failed" | tee -a "$checks"
[[ $nfail == 0 ]]
