#!/usr/bin/env bash
# The labels a Dockerfile cannot set, from what the build left inside the image: the stack's locked
# versions (/opt/rig/stack-versions.env, read from uv.lock in the build) and the sha256 of its Debian
# package list (/opt/rig/debian-packages.txt); and PYTORCH_VERSION, the torch version as NGC's
# PyTorch images set it: enroot's PyTorch hook (Pyxis on Slurm) then hands every task MASTER_ADDR,
# MASTER_PORT, WORLD_SIZE, RANK and LOCAL_RANK, as rig reads them (docs/training.md). Neither can
# come from a RUN, so this is a second, metadata-only build FROM the image; two builds whose labels
# match installed the same packages.
# Also copies the image's SBOM (/opt/rig/sbom.cdx.json) to SBOM_FILE, the build's output.
# Usage: tools/label_image.sh IMAGE:TAG SBOM_FILE
set -euo pipefail
image=${1:?usage: label_image.sh IMAGE:TAG SBOM_FILE}
sbom=${2:?usage: label_image.sh IMAGE:TAG SBOM_FILE}
read_image() { docker run --rm --network none --entrypoint cat "$image" "$@"; }

declare -A lock=()
while IFS='=' read -r key value; do
  [[ -n $key ]] && lock[$key]=$value
done < <(read_image /opt/rig/stack-versions.env)
for key in CUDA_VERSION CUDNN_VERSION TORCH_VERSION ULTRALYTICS_VERSION; do
  [[ -n ${lock[$key]:-} ]] || { echo "ERROR build: $image has no $key in /opt/rig/stack-versions.env" >&2; exit 1; }
done
sum=$(read_image /opt/rig/debian-packages.txt | sha256sum | cut -d' ' -f1)
stack=$(docker image inspect -f '{{index .Config.Labels "io.yolo-rig.stack"}}' "$image")

printf 'FROM %s\nENV PYTORCH_VERSION=%s\n' "$image" "${lock[TORCH_VERSION]}" | DOCKER_BUILDKIT=1 docker build --quiet \
  --label "org.opencontainers.image.description=Ultralytics YOLO training on CUDA ${lock[CUDA_VERSION]} (stack $stack)" \
  --label "io.yolo-rig.cuda=${lock[CUDA_VERSION]}" \
  --label "io.yolo-rig.cudnn=${lock[CUDNN_VERSION]}" \
  --label "io.yolo-rig.torch=${lock[TORCH_VERSION]}" \
  --label "io.yolo-rig.ultralytics=${lock[ULTRALYTICS_VERSION]}" \
  --label "io.yolo-rig.debian-packages=sha256:$sum" \
  -t "$image" - >/dev/null
echo "INFO build: $image labelled torch ${lock[TORCH_VERSION]}, CUDA ${lock[CUDA_VERSION]}, cuDNN ${lock[CUDNN_VERSION]}, ultralytics ${lock[ULTRALYTICS_VERSION]}, io.yolo-rig.debian-packages=sha256:$sum"

mkdir -p "$(dirname "$sbom")"
read_image /opt/rig/sbom.cdx.json >"$sbom.tmp"
mv "$sbom.tmp" "$sbom"
echo "INFO build: SBOM (CycloneDX) in $sbom"
