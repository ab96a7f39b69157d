#!/usr/bin/env bash
# Remove DWARF debug sections from shared objects under a directory (builder stage only).
# Some wheels ship them (triton 2.3.1's libtriton.so carries ~250 MB); symbols and code stay,
# so nothing changes at run time except the image size.
set -euo pipefail
root=${1:?usage: strip-debug.sh DIR}
before=$(du -sb "$root" | cut -f1)
while IFS= read -r -d '' so; do
  # grep without -q reads to the end: -q would exit at the first match and, under pipefail, the
  # SIGPIPE it leaves readelf would make some files look unstripped at random.
  if readelf -S --wide "$so" 2>/dev/null | grep '\.debug_info' >/dev/null; then
    strip --strip-debug "$so"
  fi
done < <(find "$root" -type f -name '*.so*' -print0)
after=$(du -sb "$root" | cut -f1)
echo "strip-debug: $root $((before / 1000000)) MB -> $((after / 1000000)) MB"
