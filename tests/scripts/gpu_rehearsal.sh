#!/usr/bin/env bash
# The GPU check's rehearsal, in a throwaway container of the image, as root, without network: the
# image's venv made the lent box's less its GPU (tests/scripts/box_venv.py), then tools/gpu_check.sh at
# toy sizes on the CPU with the wheels in /wheels, results in /out. The repository at /repo (read-only),
# the box's pip as a wheel in /pip (the box has pip; the image's venv has none).
# First the call without the hostlist wheel, into /out-without (it must stop at its import check);
# then the whole call; then the notes left as a kill during one part would leave them, and --again.
set -euo pipefail
pip_wheel=$(echo /pip/pip-*.whl)
/opt/venv/bin/python "$pip_wheel/pip" install -q --no-index --no-deps "$pip_wheel"
/opt/venv/bin/python /repo/tests/scripts/box_venv.py /repo/tools/gpu-box-packages.txt
cd /repo
export PYTHON=/opt/venv/bin/python GPU_CHECK_SIZE=tiny
mkdir /tmp/without
cp /wheels/*.whl /tmp/without/ && rm /tmp/without/python_hostlist-*.whl
rc=0
WHEELS=/tmp/without OUT=/out-without GPU_CHECK_WORK=/tmp/work-without bash tools/gpu_check.sh || rc=$?
echo "INFO rehearsal: without the hostlist wheel: exit $rc"
export WHEELS=/wheels OUT=/out
bash tools/gpu_check.sh
echo "$(date +%s) tail started" >>/out/notes.txt # as a kill while it ran leaves it
bash tools/gpu_check.sh --again
