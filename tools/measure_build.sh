#!/usr/bin/env bash
# Build times: cold (no layer or download cache) and after editing one file under entrypoint/.
# Usage: tools/measure_build.sh [--cold]    (--cold prunes the BuildKit cache first: slow)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --cold ]]; then
  docker builder prune -af >/dev/null
  start=$(date +%s.%N)
  make build >/tmp/rig-build-cold.log 2>&1
  echo "cold build: $(echo "$(date +%s.%N) - $start" | bc) s (make build after docker builder prune -af)"
fi

make build >/dev/null 2>&1  # warm everything first
marker=entrypoint/rig/__init__.py
cp "$marker" /tmp/rig-marker.bak
trap 'cp /tmp/rig-marker.bak "$marker"' EXIT
echo "# build-time probe $(date +%s%N)" >>"$marker"
start=$(date +%s.%N)
make build >/tmp/rig-build-edit.log 2>&1
echo "rebuild after editing $marker: $(echo "$(date +%s.%N) - $start" | bc) s"
if grep -q 'uv pip install --python /opt/venv/bin/python --quiet --require-hashes' /tmp/rig-build-edit.log \
   && ! grep -A3 'require-hashes --no-deps -r /tmp/req-base.txt' /tmp/rig-build-edit.log | grep -q CACHED; then
  echo "WARNING: the dependency layer was rebuilt"
fi
