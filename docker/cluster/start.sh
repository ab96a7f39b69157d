#!/bin/bash
# The local cluster's containers (compose.yaml), one role each:
#   keygen      a one-shot that writes the cluster's MUNGE key into the shared `munge` volume
#               when it holds none (made at `make cluster-up`, never baked in a layer);
#   controller  munged + slurmctld, and the submit host (`make cluster-shell`);
#   node        munged + slurmd, with four fake GPU device files for the GPU scheduling.
set -euo pipefail

key=/etc/munge/munge.key
log() { echo "INFO cluster: $*"; }

case ${1:-} in
  keygen)
    if [[ ! -s $key ]]; then
      mungekey --create --keyfile="$key.new" --force
      chown munge:munge "$key.new"
      chmod 0400 "$key.new"
      mv "$key.new" "$key"
      log "generated the cluster's MUNGE key"
    fi
    exit 0
    ;;
  controller | node) ;;
  *)
    echo "ERROR cluster: unknown role ${1:-(none)}; use keygen, controller or node" >&2
    exit 2
    ;;
esac

[[ -s $key ]] || { echo "ERROR cluster: no MUNGE key in $key; start the cluster with make cluster-up" >&2; exit 1; }
# The users' homes, on the shared `home` volume as a site's are on every host.
for user in $(getent passwd | awk -F: '$3 >= 1000 && $3 < 60000 { print $1 }'); do
  home=$(getent passwd "$user" | cut -d: -f6)
  [[ -d $home ]] || install -d -o "$user" -g "$(id -gn "$user")" -m 0755 "$home"
done
# The nodes' root file system is read-only: the daemons' folders are on tmpfs (compose.yaml).
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
runuser -u munge -- /usr/sbin/munged
install -d -o slurm -g slurm -m 0755 /var/log/slurm

if [[ $1 == controller ]]; then
  install -d -o slurm -g slurm -m 0700 /var/spool/slurmctld
  log "slurmctld on $(hostname)"
  exec /usr/sbin/slurmctld -D -s
fi

# enroot's PyTorch hook, as a site's admin installs it from enroot's extras: its presence turns it on
# in pyxis-task, which does what the hook does (the file is the switch, not the code).
install -d -m 0755 /etc/enroot/hooks.d
printf '# enroot hooks/extra/50-slurm-pytorch.sh: on (docker/cluster/pyxis-task)\n' \
  >/etc/enroot/hooks.d/50-slurm-pytorch.sh
# Character devices with NVIDIA's major number and no driver behind them: Slurm only stats them.
for i in 0 1 2 3; do
  [[ -e /dev/nvidia$i ]] || mknod -m 0666 "/dev/nvidia$i" c 195 "$i"
done
install -d -m 0755 /var/spool/slurmd
log "slurmd on $(hostname)"
exec /usr/sbin/slurmd -D -s
