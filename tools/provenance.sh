#!/usr/bin/env bash
# The build's provenance for IMAGE into FILE: an in-toto SLSA v1 predicate (tools/provenance.py, run
# with the image's own Python: the host needs none) of the source's revision, the Dockerfile's and
# uv.lock's SHA-256 as this build read them, the base image's digest and the build arguments (a
# user name or token in a URL removed). `make push` attaches it to the pushed digest with cosign.
# Usage: tools/provenance.sh IMAGE FILE BASE_IMAGE [NAME=VALUE...]   (the build arguments)
set -euo pipefail
image=${1:?usage: provenance.sh IMAGE FILE BASE_IMAGE [NAME=VALUE...]}
out=${2:?usage: provenance.sh IMAGE FILE BASE_IMAGE [NAME=VALUE...]}
base=${3:?usage: provenance.sh IMAGE FILE BASE_IMAGE [NAME=VALUE...]}
shift 3
cd "$(dirname "$0")/.."

args=(--image-id "$(docker image inspect -f '{{.Id}}' "$image")" --base-image "$base")
# A pulled base: its registry digest (under its own name: a push elsewhere adds others); one built
# here (make base-image): its ID.
name=${base%@*}
[[ ${name##*/} == *:* ]] && name=${name%:*}
digest=$(docker image inspect -f '{{range .RepoDigests}}{{println .}}{{end}}' "$base" | sed -n "s|^$name@||p" | head -n 1)
args+=(--base-digest "${digest:-$(docker image inspect -f '{{.Id}}' "$base")}")
args+=(--revision "$(git rev-parse HEAD 2>/dev/null || true)")
for file in Dockerfile uv.lock; do
  args+=(--dependency "$file=sha256:$(sha256sum "$file" | cut -d' ' -f1)")
done
for pair in "$@"; do
  [[ $pair == SOURCE_URL=* ]] && args+=(--source "${pair#SOURCE_URL=}")
  args+=(--build-arg "$pair")
done
if [[ -n ${GITHUB_RUN_ID:-} ]]; then
  args+=(--builder "${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_REPOSITORY:-}/actions/runs/$GITHUB_RUN_ID")
fi
mkdir -p "$(dirname "$out")"
docker run --rm -i --network none --entrypoint /opt/venv/bin/python "$image" - "${args[@]}" \
  <tools/provenance.py >"$out.tmp"
mv "$out.tmp" "$out"
echo "INFO build: provenance (in-toto SLSA v1) in $out"
