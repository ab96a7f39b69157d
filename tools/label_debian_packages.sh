#!/usr/bin/env bash
# Label an image with the sha256 of its Debian package list (/opt/rig/debian-packages.txt, written
# by the Dockerfile from dpkg-query). A label cannot come from a RUN, so this is a second, metadata-only
# build FROM the image: two builds whose labels match installed the same Debian packages.
# Usage: tools/label_debian_packages.sh IMAGE:TAG
set -euo pipefail
image=${1:?usage: label_debian_packages.sh IMAGE:TAG}
sum=$(docker run --rm --network none --entrypoint sha256sum "$image" /opt/rig/debian-packages.txt | cut -d' ' -f1)
echo "FROM $image" | DOCKER_BUILDKIT=1 docker build --quiet \
  --label "io.yolo-rig.debian-packages=sha256:$sum" -t "$image" - >/dev/null
echo "INFO build: $image labelled io.yolo-rig.debian-packages=sha256:$sum"
