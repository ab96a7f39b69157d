#!/usr/bin/env bash
# Build a local equivalent of debian:bookworm-slim from a Debian mirror, for hosts that cannot
# pull from a container registry. Usage: base-image.sh IMAGE_REF [MIRROR]
set -euo pipefail
ref=${1:?usage: base-image.sh IMAGE_REF [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}

command -v debootstrap >/dev/null || { echo "ERROR base-image: debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
root=$(mktemp -d /tmp/rig-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "INFO base-image: debootstrap --variant=minbase $suite from $mirror"
debootstrap --variant=minbase "$suite" "$root" "$mirror" >/tmp/rig-debootstrap.log 2>&1 \
  || { echo "ERROR base-image: debootstrap failed; see /tmp/rig-debootstrap.log"; exit 1; }
# Slim it as debian:*-slim does: no apt lists, docs, man pages or locales beyond C.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" >"$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' - "$ref" >/dev/null
echo "INFO base-image: $ref ($(docker image inspect -f '{{.Size}}' "$ref" | numfmt --to=iec))"
