#!/usr/bin/env bash
# apt-get install for image builds: optional mirror, optional proxy CA, no lists left behind.
# Usage: apt-install.sh [--mirror URL] PACKAGE...
# The CA bundle, when given, is the BuildKit secret mounted at /run/secrets/ca: it is passed on
# apt's command line and never written into the image.
set -euo pipefail

if [[ ${1:-} == --mirror ]]; then
  mirror=$2
  shift 2
  if [[ -n $mirror ]]; then
    . /etc/os-release
    rm -f /etc/apt/sources.list.d/debian.sources
    printf 'deb %s %s main\ndeb %s %s-updates main\n' \
      "$mirror" "$VERSION_CODENAME" "$mirror" "$VERSION_CODENAME" >/etc/apt/sources.list
  fi
fi

opts=(-o APT::Install-Recommends=false -o Dpkg::Use-Pty=0)
[[ -f /run/secrets/ca ]] && opts+=(-o Acquire::https::CAInfo=/run/secrets/ca)
export DEBIAN_FRONTEND=noninteractive
apt-get "${opts[@]}" update -qq
apt-get "${opts[@]}" install -y -qq "$@" >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
