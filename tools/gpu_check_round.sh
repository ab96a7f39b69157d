#!/usr/bin/env bash
# The GPU checks that one lent one-GPU box can run in one call of under 10 minutes, in the order they
# are most wanted, each cut to its share of the budget (the device tool's limits: one command of at most
# 10 minutes, at most 8 files back). Run from the repository root with the Ultralytics wheels in .whl/
# (see tools/gpu_check_bench.sh's header):   OUT=/some/dir tools/gpu_check_round.sh
#   1. SyncBatchNorm's graph breaks under torch.compile with this torch (issue 21 item 13), 90 s;
#   2. the device tail on CUDA: equality with Ultralytics' Mosaic + RandomPerspective (OpenCV) and
#      RandomHSV + Format, ms per batch with and without the geometry, 150 s;
#   3. rig bench at 640 px (loader stock against ours, GPU utilisation of a real run), then the
#      compiled step, 310 s.
# Writes $OUT/summary.txt (every part's summary) and $OUT/results.tgz (every log). Exit 0 when every
# part that ran exited 0.
set -uo pipefail
OUT=${OUT:?set OUT to a directory for the results}
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=$(mktemp -d /tmp/rig-gpu-round.XXXXXX)
if compgen -G ".whl/*.whl" >/dev/null && ! "$PY" -c 'import ultralytics' 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .whl/*.whl \
        && export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 WHEELS=/nonexistent # installed once, above
rc=0
part() { # name command...: runs one part, its summary appended to $OUT/summary.txt
    local name=$1
    shift
    echo "== $name ($(date -u +%H:%M:%S))" >>"$OUT/summary.txt"
    "$@"
    local r=$?
    echo "== $name rc=$r" >>"$OUT/summary.txt"
    [ "$r" -eq 0 ] || rc=1
}
mkdir -p "$WORK/syncbn" "$WORK/augment" "$WORK/bench"
part syncbn bash -c "PYTHONPATH=\$PWD/entrypoint:\${PYTHONPATH:-} timeout 90 $PY tools/gpu_check_syncbn_compile.py \
    >$WORK/syncbn/syncbn.log 2>&1; r=\$?; grep '^SYNCBN' $WORK/syncbn/syncbn.log >>$OUT/summary.txt; \
    [ \$r -eq 0 ] || [ \$r -eq 2 ]"
part augment env OUT="$WORK/augment" PARTS="probes" BUDGET_S=150 bash tools/gpu_check_augment.sh
cat "$WORK/augment/summary.txt" >>"$OUT/summary.txt" 2>/dev/null
part bench env OUT="$WORK/bench" BUDGET_S=310 bash tools/gpu_check_bench.sh
cat "$WORK/bench/summary.txt" >>"$OUT/summary.txt" 2>/dev/null
find "$WORK" -name '*.pt' -delete
tar czf "$OUT/results.tgz" -C "$WORK" syncbn augment bench
exit "$rc"
