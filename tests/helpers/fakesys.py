"""Fake /sys trees for the launch tests: just the files rig.hardware.topology reads."""

from __future__ import annotations

from pathlib import Path

NVIDIA = "0x10de"


class FakeSys:
    """Builds a sysfs tree under root: NUMA nodes, PCI GPUs, a cgroup cpuset, hyperthread siblings."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def node(self, n: int, cpulist: str) -> FakeSys:
        self._write(f"devices/system/node/node{n}/cpulist", cpulist)
        return self

    def gpu(
        self, bus: str, node: int, local_cpulist: str | None, vendor: str = NVIDIA, cls: str = "0x030200"
    ) -> FakeSys:
        dev = f"bus/pci/devices/{bus}"
        self._write(f"{dev}/numa_node", str(node))
        self._write(f"{dev}/vendor", vendor)
        self._write(f"{dev}/class", cls)
        if local_cpulist is not None:
            self._write(f"{dev}/local_cpulist", local_cpulist)
        return self

    def cpuset(self, cpulist: str) -> FakeSys:
        self._write("fs/cgroup/cpuset.cpus.effective", cpulist)
        return self

    def online(self, cpulist: str) -> FakeSys:
        self._write("devices/system/cpu/online", cpulist)
        return self

    def siblings(self, *groups: str) -> FakeSys:
        """Hyperthread sibling groups, e.g. siblings('0,8', '1,9')."""
        for group in groups:
            for cpu in group.split(","):
                self._write(f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", group)
        return self


def bus(i: int, domain: str = "0000") -> str:
    """A plausible bus id per GPU slot: 0000:18:00.0, 0000:2a:00.0, ..."""
    return f"{domain}:{0x18 + 0x12 * i:02x}:00.0"


def nvidia_device(root: Path, minor: int, bus_id: str | None = None) -> None:
    """Under a filesystem root: /dev/nvidia<minor> (a plain file will do) and, with bus_id, the
    driver's /proc/driver/nvidia/gpus/<bus>/information that names its minor."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev" / f"nvidia{minor}").touch()
    if bus_id is not None:
        info = root / "proc/driver/nvidia/gpus" / bus_id / "information"
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 85\nDevice Minor: \t {minor}\n")


def fabric_tree(
    root: Path,
    *,
    rdma: tuple[str, ...] = (),
    uverbs: int = 0,
    library: bool = True,
    routes: tuple[str, ...] = ("eth0",),
) -> Path:
    """A filesystem root as rig.hardware.fabric reads it: RDMA devices in /sys/class/infiniband, their
    device nodes in /dev/infiniband (plain files will do), libibverbs, interfaces with an IPv4 route
    (ifindex in the order given)."""
    for name in rdma:
        (root / "sys/class/infiniband" / name).mkdir(parents=True, exist_ok=True)
    if uverbs:
        (root / "dev/infiniband").mkdir(parents=True, exist_ok=True)
        (root / "dev/infiniband/rdma_cm").touch()
        for i in range(uverbs):
            (root / f"dev/infiniband/uverbs{i}").touch()
    if library:
        (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True, exist_ok=True)
        (root / "usr/lib/x86_64-linux-gnu/libibverbs.so.1").touch()
    table = ["Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT"]
    for index, name in enumerate(("lo", *routes), start=1):
        (root / "sys/class/net" / name).mkdir(parents=True, exist_ok=True)
        (root / "sys/class/net" / name / "ifindex").write_text(f"{index}\n")
        if name != "lo":
            table.append(f"{name}\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0")
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/route").write_text("\n".join(table) + "\n")
    return root
