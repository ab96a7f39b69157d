#!/usr/bin/env bash
# Provision a Debian 12 CI host: Docker engine, compose v2, buildx, and the host tools the
# tests drive (OpenSSH client, headless Chromium, Prometheus, a registry, cosign). Idempotent: safe to run on every CI start.
set -euo pipefail

log() { echo "INFO provision: $*"; }

export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v ssh >/dev/null || need_apt+=(openssh-client)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need_apt+=(chromium)
command -v ssh-keygen >/dev/null || need_apt+=(openssh-client)
command -v openssl >/dev/null || need_apt+=(openssl)
# Prometheus 2.42 and promtool: the metrics tests scrape a run and lint /metrics with them.
command -v promtool >/dev/null || need_apt+=(prometheus)
# A registry (distribution 2.8): the release test pushes the image to one on loopback and pulls it back.
command -v docker-registry >/dev/null || need_apt+=(docker-registry)
if ((${#need_apt[@]})); then
  apt-get update -qq
  # Another distribution (a forge's Ubuntu runner) may lack one (chromium): the tests that need it skip.
  have=()
  for package in "${need_apt[@]}"; do
    if apt-cache show "$package" >/dev/null 2>&1; then
      have+=("$package")
    else
      echo "WARNING provision: no package $package here; the tests that need it skip"
    fi
  done
  log "apt-get install ${have[*]}"
  apt-get install -y -qq --no-install-recommends "${have[@]}" >/dev/null
fi
# The tests run their own Prometheus and registry on free loopback ports; the packages' services
# must not hold 9090 and 5000.
for service in prometheus docker-registry; do
  if command -v systemctl >/dev/null && systemctl list-unit-files "$service.service" >/dev/null 2>&1; then
    systemctl disable --now "$service.service" >/dev/null 2>&1 || true
  fi
done

# Packages bookworm lacks, from trixie, whose builds depend only on libc6: Compose v2 and buildx;
# cosign 2.5 (a static binary), which signs and verifies the pushed image (make push, make up).
from_trixie=()
if ! docker compose version >/dev/null 2>&1 || ! docker buildx version >/dev/null 2>&1; then
  from_trixie+=(docker-compose docker-buildx)
fi
command -v cosign >/dev/null || from_trixie+=(cosign)
if ((${#from_trixie[@]})); then
  log "installing ${from_trixie[*]} from trixie"
  tmp=$(mktemp -d)
  mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
  printf 'deb http://deb.debian.org/debian trixie main\n' >"$tmp/sources.list"
  opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=-"
        -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::Archives=$tmp/archives")
  apt-get "${opts[@]}" update -qq
  (cd "$tmp" && apt-get "${opts[@]}" download "${from_trixie[@]}")
  dpkg -i "$tmp"/*.deb >/dev/null
  rm -rf "$tmp"
fi

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  # setsid: the engine outlives this script (tests and later steps use it).
  setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "ERROR provision: dockerd did not start; see /var/log/dockerd.log"; exit 1; }
fi
log "docker $(docker version --format '{{.Server.Version}}'), $(docker compose version --short 2>/dev/null | head -1) compose, buildx $(docker buildx version | awk '{print $2}'), cosign $(dpkg-query -W -f='${Version}' cosign 2>/dev/null || echo '(not from Debian)')"
