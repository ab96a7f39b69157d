#!/usr/bin/env bash
# Compare two builds file by file: the sha256 of every file, every link's target, and every entry's
# mode and owner under DIRS (default /opt/venv), read in throwaway containers without network.
# Works on the image and on a stage built with --target (docs/image.md: Reproducible builds).
# Usage: tools/compare_builds.sh IMAGE_A IMAGE_B [DIR...]     Exit 0 when they are the same.
set -euo pipefail
a=${1:?usage: compare_builds.sh IMAGE_A IMAGE_B [DIR...]}
b=${2:?usage: compare_builds.sh IMAGE_A IMAGE_B [DIR...]}
shift 2
if (($#)); then dirs=("$@"); else dirs=(/opt/venv); fi
work=$(mktemp -d /tmp/rig-compare.XXXXXX)
trap 'rm -rf "$work"' EXIT

manifest() { # image -> sorted lines "sha256  path", "link path -> target", "mode owner path"
  # shellcheck disable=SC2016  # expanded in the container
  docker run --rm --network none --user 0 --entrypoint bash "$1" -c '
    find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    find "$@" -type l -printf "link %p -> %l\n" | LC_ALL=C sort
    find "$@" -printf "mode %m %U:%G %p\n" | LC_ALL=C sort' _ "${dirs[@]}"
}
manifest "$a" >"$work/a"
manifest "$b" >"$work/b"
files=$(grep -cv '^\(link\|mode\) ' "$work/a" || true)
pyc=$(grep -v '^\(link\|mode\) ' "$work/a" | grep -c '\.pyc$' || true)
if diff -q "$work/a" "$work/b" >/dev/null; then
  echo "INFO compare: identical: $files files ($pyc .pyc) under ${dirs[*]} in $a and $b"
  exit 0
fi
# "<" lines are A's, ">" lines B's: a path on both sides is a changed file, on one side added or removed.
diff "$work/a" "$work/b" | grep '^[<>]' | sed 's/^\(.\) [0-9a-f]\{64\}  /\1 /' | sort -k2 >"$work/diff" || true
head -n 50 "$work/diff"
echo "ERROR compare: $(grep -c '^<' "$work/diff" || true) of $files files or entries differ under ${dirs[*]}"
exit 1
