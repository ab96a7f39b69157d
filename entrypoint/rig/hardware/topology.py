"""Discovery: the GPUs this container may use, their NUMA nodes and local CPUs, the allowed CPUs.

Everything is read from a sysfs tree given as a parameter, so a copy of another machine's `/sys`
plans exactly like that machine (tests build such trees in a temporary directory). NVML is asked
only for which GPUs the container sees, and only when reading the live `/sys`.

Without NVML, sysfs alone would over-promise: in a container `/sys/bus/pci` lists the host's GPUs
whether or not any was given to the container. So under a filesystem root (the live `/`, or a
test's fake one) a GPU counts only when its device node `/dev/nvidia<minor>` exists; a copy of a
`/sys` alone has no `/dev` and is trusted as it is (planning another machine).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig import hostenv
from rig.errors import RigError
from rig.hardware import nvml

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0300 (VGA) and 0x0302 (3D controller: every datacenter GPU).
_GPU_CLASSES = ("0x0300", "0x0302")
_BUS_ID = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


@dataclass(frozen=True)
class Gpu:
    index: int  # the CUDA ordinal this process uses for it (after CUDA_VISIBLE_DEVICES)
    bus_id: str  # as sysfs writes it: 0000:18:00.0
    numa_node: int  # -1 when the platform does not say (VMs, single-node firmware)
    local_cpus: frozenset[int]


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...]
    allowed_cpus: frozenset[int]
    node_cpus: Mapping[int, frozenset[int]] = field(default_factory=dict)
    # Physical cores as groups of hardware threads, so ranks never split one core between them.
    cores: tuple[frozenset[int], ...] = ()
    source: str = "sysfs"  # where the GPU list came from: nvml, sysfs or given
    # GPUs whose device files this container has without the driver's libraries (Apptainer binds
    # the host's /dev; only `--nv` brings the libraries): none of them can run CUDA here.
    without_driver: int = 0


def parse_cpulist(text: str) -> frozenset[int]:
    """'0-3,8,10-11' -> {0,1,2,3,8,10,11}; the kernel's list format."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of parse_cpulist: {0,1,2,3,8} -> '0-3,8'."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def normalize_bus_id(bus_id: str) -> str:
    """NVML writes 00000000:18:00.0, nvidia-smi 00000000:18:00.0 too; sysfs writes 0000:18:00.0."""
    m = _BUS_ID.match(bus_id.strip().lower())
    if not m:
        raise RigError(f"not a PCI bus id: {bus_id!r}; write it as sysfs does, e.g. 0000:18:00.0")
    # NVML pads the domain to 8 digits, sysfs to at least 4; a domain above ffff keeps all of them.
    domain = f"{int(m.group(1) or '0', 16):04x}"
    return f"{domain}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def sysfs_dir(root: Path) -> Path:
    """Accept either a sysfs tree (`/sys`) or a filesystem root that holds one (`/`)."""
    if (root / "sys" / "bus").is_dir() or (root / "sys" / "devices").is_dir():
        return root / "sys"
    return root


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _node_cpus(sysfs: Path) -> dict[int, frozenset[int]]:
    nodes: dict[int, frozenset[int]] = {}
    node_dir = sysfs / "devices/system/node"
    for entry in sorted(node_dir.glob("node[0-9]*")):
        text = _read(entry / "cpulist")
        if text is not None:
            nodes[int(entry.name[4:])] = parse_cpulist(text)
    return nodes


def _all_cpus(sysfs: Path, nodes: Mapping[int, frozenset[int]]) -> frozenset[int]:
    online = _read(sysfs / "devices/system/cpu/online")
    if online:
        return parse_cpulist(online)
    if nodes:
        return frozenset().union(*nodes.values())
    return frozenset(range(os.cpu_count() or 1))


def _cores(sysfs: Path, cpus: frozenset[int]) -> tuple[frozenset[int], ...]:
    groups: set[frozenset[int]] = set()
    for cpu in cpus:
        text = _read(sysfs / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        groups.add(parse_cpulist(text) & cpus if text else frozenset({cpu}))
    return tuple(sorted((g for g in groups if g), key=min))


def _is_live(sysfs: Path) -> bool:
    try:
        return sysfs.resolve() == Path("/sys").resolve()
    except OSError:
        return False


def _allowed_cpus(sysfs: Path, live: bool, all_cpus: frozenset[int]) -> frozenset[int]:
    if live:
        # The scheduler's view already is the cgroup cpuset intersected with any taskset.
        return frozenset(os.sched_getaffinity(0))
    text = _read(sysfs / "fs/cgroup/cpuset.cpus.effective")
    return parse_cpulist(text) & all_cpus if text else all_cpus


def container_cpus(sys_root: Path = Path("/")) -> frozenset[int]:
    """The CPUs the container's cgroup allows (v2, then v1), whatever this thread's own affinity;
    the scheduler's view where no cgroup says."""
    sysfs = sysfs_dir(Path(sys_root))
    for name in ("fs/cgroup/cpuset.cpus.effective", "fs/cgroup/cpuset/cpuset.effective_cpus"):
        text = _read(sysfs / name)
        with contextlib.suppress(ValueError):
            if text and (cpus := parse_cpulist(text)):
                return cpus
    return frozenset(os.sched_getaffinity(0))


def _sysfs_gpus(sysfs: Path) -> list[str]:
    found: list[str] = []
    for dev in sorted((sysfs / "bus/pci/devices").glob("*")):
        vendor, cls = _read(dev / "vendor"), _read(dev / "class")
        if vendor == NVIDIA_VENDOR and cls is not None and cls.startswith(_GPU_CLASSES):
            found.append(normalize_bus_id(dev.name))
    return found


_MINOR = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.MULTILINE)


def _device_minors(fs_root: Path, bus_ids: Sequence[str]) -> dict[str, int]:
    """Each GPU's device minor, as the driver's /proc/driver/nvidia/gpus/<bus>/information says.
    Where the driver says nothing at all, it numbers GPUs in the order it probes them: bus order."""
    minors: dict[str, int] = {}
    for bus in bus_ids:
        text = _read(fs_root / "proc/driver/nvidia/gpus" / bus / "information")
        m = _MINOR.search(text) if text else None
        if m:
            minors[bus] = int(m.group(1))
    return minors or {bus: position for position, bus in enumerate(bus_ids)}


def _with_device_node(fs_root: Path | None, bus_ids: list[str]) -> list[str]:
    """The GPUs this container may open: those whose /dev/nvidia<minor> exists under fs_root.
    None (a copy of a /sys alone, or a root without /dev) trusts sysfs as it is."""
    if fs_root is None or not (fs_root / "dev").is_dir():
        return bus_ids
    minors = _device_minors(fs_root, bus_ids)
    return [b for b in bus_ids if b in minors and (fs_root / "dev" / f"nvidia{minors[b]}").exists()]


def nvml_gpus(module: Any | None = None) -> list[tuple[str, str]] | None:
    """(bus id, UUID) of every GPU NVML shows this container, in bus order; None without a driver."""
    with nvml.session(module) as (lib, _):
        if lib is None:  # no driver, no libnvidia-ml: a CPU-only container
            return None
        try:
            gpus = [(lib.pci_bus_id(g.index), g.uuid) for g in lib.gpus()]
        except Exception as e:  # a GPU fallen off the bus, a driver/library mismatch
            raise RigError(
                f"NVML cannot read this container's GPUs ({nvml.describe_error(e)}); nvidia-smi shows "
                "which one fails (a lost GPU needs a reset or a reboot)"
            ) from None
    # CUDA_DEVICE_ORDER=PCI_BUS_ID (rig's GPU environment) makes CUDA ordinals follow bus order.
    return sorted((normalize_bus_id(b), u) for b, u in gpus)


def visible_entries(text: str) -> list[str]:
    """A visible-device list's entries (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES): indices or
    UUIDs, in order, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def apply_visible_devices(
    bus_ids: Sequence[str], visible: str | None, uuids: Mapping[str, str] | None = None
) -> list[str]:
    """The GPUs CUDA exposes, in CUDA ordinal order, under CUDA_VISIBLE_DEVICES=visible."""
    if visible is None:
        return list(bus_ids)
    chosen: list[str] = []
    for item in visible_entries(visible):
        if item.isdigit() or (item.startswith("-") and item[1:].isdigit()):
            idx = int(item)
            if idx < 0 or idx >= len(bus_ids):
                break  # CUDA stops enumerating at the first invalid entry
            chosen.append(bus_ids[idx])
        else:
            by_uuid = {u: b for b, u in (uuids or {}).items()}
            match = [b for u, b in by_uuid.items() if u == item or u.startswith(item)]
            if len(match) != 1:
                raise RigError(
                    f"CUDA_VISIBLE_DEVICES entry {item!r} is not a GPU index or a known GPU UUID; "
                    "use indices (0,1) or the UUIDs `nvidia-smi -L` prints (MIG devices are not supported)"
                )
            chosen.append(match[0])
    if len(set(chosen)) != len(chosen):
        raise RigError(f"CUDA_VISIBLE_DEVICES={visible} names a GPU twice; list each GPU once")
    return chosen


def read_topology(
    sys_root: Path = Path("/"),
    gpu_bus_ids: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Topology:
    """Read the machine under sys_root. gpu_bus_ids, when given, are the GPUs in CUDA ordinal order."""
    env = os.environ if environ is None else environ
    sysfs = sysfs_dir(Path(sys_root))
    fs_root = Path(sys_root) if sysfs != Path(sys_root) else None  # a root that holds /sys (and /dev)
    live = _is_live(sysfs)
    nodes = _node_cpus(sysfs)
    all_cpus = _all_cpus(sysfs, nodes)
    allowed = _allowed_cpus(sysfs, live, all_cpus)

    source = "given"
    without_driver = 0
    if gpu_bus_ids is not None:
        buses = [normalize_bus_id(b) for b in gpu_bus_ids]
        if len(set(buses)) != len(buses):
            raise RigError(f"--gpu-bus-ids names a GPU twice: {','.join(gpu_bus_ids)}; list each GPU once")
    else:
        found = nvml_gpus() if live else None
        if found is not None:
            source = "nvml"
            buses = apply_visible_devices([b for b, _ in found], env.get("CUDA_VISIBLE_DEVICES"), dict(found))
        else:
            source = "sysfs"
            found_buses = _with_device_node(fs_root, _sysfs_gpus(sysfs))
            if live and found_buses and hostenv.passes_host_env(env):
                # The host's /dev, bound in by Apptainer, without --nv's driver libraries (no NVML).
                without_driver, found_buses = len(found_buses), []
            buses = apply_visible_devices(found_buses, env.get("CUDA_VISIBLE_DEVICES"))

    gpus: list[Gpu] = []
    for index, bus in enumerate(buses):
        dev = sysfs / "bus/pci/devices" / bus
        if not dev.exists():
            raise RigError(
                f"GPU {bus} is not under {sysfs}/bus/pci/devices; give bus ids as sysfs writes them "
                "(0000:18:00.0) and a sysfs root that holds them"
            )
        node_text = _read(dev / "numa_node")
        node = int(node_text) if node_text not in (None, "") else -1
        local_text = _read(dev / "local_cpulist")
        local = parse_cpulist(local_text) if local_text else nodes.get(node, all_cpus)
        gpus.append(Gpu(index=index, bus_id=bus, numa_node=node, local_cpus=local))
    return Topology(
        gpus=tuple(gpus),
        allowed_cpus=allowed,
        node_cpus=nodes,
        cores=_cores(sysfs, allowed),
        source=source,
        without_driver=without_driver,
    )
