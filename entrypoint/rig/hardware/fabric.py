"""The fabric between nodes: which transport NCCL will take for a multi-node run, and over what.

NCCL moves tensors over InfiniBand/RoCE (its IB transport, through rdma-core's libibverbs) when the
container holds three things: the library (the image carries rdma-core's user space), the host's
RDMA devices (/sys/class/infiniband, which sysfs shows whether or not they were passed) and their
device nodes (/dev/infiniband/uverbs*, only where the runtime passed them). Short of any, it falls
back to TCP sockets on one interface: a multi-node run many times slower, and silent. gloo (CPU
ranks, and torch's store) always uses sockets.

Discovery reads a filesystem root (tests build fake trees); `transport` is a pure function of what
it read and the NCCL/gloo variables of the launch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Where Debian's and Ubuntu's libibverbs1 puts the library, and where a site hook may inject it.
VERBS_LIBRARY = "libibverbs.so.1"
_LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib")
# NCCL's own choice without NCCL_SOCKET_IFNAME (ncclFindInterfaces): an ib* interface first, then
# any other but docker* and lo.
_NCCL_SKIPPED = ("docker", "lo")


@dataclass(frozen=True)
class Fabric:
    """What the container sees of the fabric."""

    rdma_devices: tuple[str, ...]  # /sys/class/infiniband: mlx5_0, ... (InfiniBand and RoCE alike)
    uverbs: tuple[str, ...]  # /dev/infiniband/uverbs*: the devices passed into the container
    verbs_library: bool  # libibverbs.so.1 is installed
    interfaces: tuple[str, ...]  # with an IPv4 route, in ifindex order (what NCCL would list)
    nccl_ifname: str | None  # NCCL_SOCKET_IFNAME as set
    gloo_ifname: str | None  # GLOO_SOCKET_IFNAME as set
    ib_disabled: str | None  # why NCCL is told not to use IB (NCCL_IB_DISABLE, NCCL_NET), None: not told


def _names(folder: Path, prefix: str = "") -> tuple[str, ...]:
    try:
        return tuple(sorted(p.name for p in folder.iterdir() if p.name.startswith(prefix)))
    except OSError:
        return ()


def _ifindex(net: Path, name: str) -> int:
    try:
        return int((net / name / "ifindex").read_text().strip())
    except (OSError, ValueError):
        return 1 << 30


def routed_interfaces(root: Path) -> tuple[str, ...]:
    """The interfaces with an IPv4 route (so an address), in ifindex order."""
    try:
        lines = (root / "proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return ()
    names = {line.split()[0] for line in lines if line.split()}
    net = root / "sys/class/net"
    return tuple(sorted(names, key=lambda n: (_ifindex(net, n), n)))


def _ib_disabled(environ: Mapping[str, str]) -> str | None:
    if environ.get("NCCL_IB_DISABLE", "").strip() not in ("", "0"):
        return f"NCCL_IB_DISABLE={environ['NCCL_IB_DISABLE'].strip()}"
    net = environ.get("NCCL_NET", "").strip()
    if net and net.lower() == "socket":
        return f"NCCL_NET={net}"
    return None


def read_fabric(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> Fabric:
    env = environ if environ is not None else {}
    library = False
    for folder in _LIBRARY_DIRS:
        with contextlib.suppress(OSError):
            library = library or (root / folder / VERBS_LIBRARY).exists()
    return Fabric(
        rdma_devices=_names(root / "sys/class/infiniband"),
        uverbs=_names(root / "dev/infiniband", "uverbs"),
        verbs_library=library,
        interfaces=routed_interfaces(root),
        nccl_ifname=env.get("NCCL_SOCKET_IFNAME", "").strip() or None,
        gloo_ifname=env.get("GLOO_SOCKET_IFNAME", "").strip() or None,
        ib_disabled=_ib_disabled(env),
    )


def nccl_interface(interfaces: tuple[str, ...]) -> str | None:
    """The interface NCCL picks on its own: the first ib*, else the first but docker* and lo."""
    usable = [n for n in interfaces if not n.startswith(_NCCL_SKIPPED)]
    return next((n for n in usable if n.startswith("ib")), usable[0] if usable else None)


@dataclass(frozen=True)
class Transport:
    rdma: bool  # NCCL's IB transport (InfiniBand or RoCE); False: TCP sockets
    why: str  # what decided it, with the fix when it is sockets
    sockets: str  # the interfaces NCCL's sockets (its bootstrap, or all its traffic) and gloo use

    def line(self) -> str:
        how = "InfiniBand/RoCE" if self.rdma else "TCP sockets"
        return f"fabric: NCCL between nodes over {how} ({self.why}); {self.sockets}"


MISSING_DEVICES_FIX = (
    "pass the host's RDMA devices into the container: Docker `--device /dev/infiniband --cap-add "
    "IPC_LOCK --ulimit memlock=-1`, Kubernetes an RDMA device plugin's resource (e.g. "
    "rdma/hca_shared_devices_a) with capabilities IPC_LOCK, Slurm/Pyxis the nodes' /dev/infiniband "
    "(enroot mounts it where the host has it)"
)


def _sockets(f: Fabric) -> str:
    picked = nccl_interface(f.interfaces)
    nccl = (
        f"NCCL_SOCKET_IFNAME={f.nccl_ifname}"
        if f.nccl_ifname
        else f"NCCL picks {picked} (NCCL_SOCKET_IFNAME unset)"
        if picked
        else "NCCL finds no routed interface (set NCCL_SOCKET_IFNAME)"
    )
    gloo = (
        f"GLOO_SOCKET_IFNAME={f.gloo_ifname}"
        if f.gloo_ifname
        else "gloo uses the address the host name resolves to (GLOO_SOCKET_IFNAME unset)"
    )
    return f"{nccl}, {gloo}"


def gloo_line(f: Fabric) -> str:
    """CPU ranks: gloo, sockets always."""
    return f"fabric: gloo between nodes over TCP sockets (CPU ranks); {_sockets(f).partition(', ')[2]}"


def transport(f: Fabric) -> Transport:
    """What NCCL will take between nodes, and why."""
    sockets = _sockets(f)
    if f.ib_disabled:
        return Transport(False, f"{f.ib_disabled} turns InfiniBand/RoCE off", sockets)
    if not f.verbs_library:
        missing = f"no {VERBS_LIBRARY} in the container: install rdma-core's libibverbs1"
        return Transport(False, missing, sockets)
    if not f.rdma_devices:
        return Transport(False, "no InfiniBand/RoCE device in /sys/class/infiniband", sockets)
    if not f.uverbs:
        return Transport(
            False,
            f"the host has {', '.join(f.rdma_devices)} but /dev/infiniband is not in the container: "
            + MISSING_DEVICES_FIX,
            sockets,
        )
    return Transport(True, f"{', '.join(f.rdma_devices)} through {', '.join(f.uverbs)}", sockets)
