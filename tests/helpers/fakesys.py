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
