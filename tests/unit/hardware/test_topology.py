"""Topology discovery (rig.hardware.topology) on fake trees: CPU lists, bus ids, GPUs from /sys, /dev,
the driver's /proc and NVML; the container's CPUs, as the image cache's builder widens to them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.errors import RigError
from rig.hardware import topology
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.topology import (
    apply_visible_devices,
    format_cpulist,
    normalize_bus_id,
    nvml_gpus,
    parse_cpulist,
    read_topology,
)

from tests.helpers.fakesys import FakeSys, bus, nvidia_device
from tests.scripts.fake_nvml import NVML_ERROR_GPU_IS_LOST, FakeGpu, FakeNvml, NVMLError


def test_container_cpus_come_from_the_cgroup_v2_cpuset(tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").node(0, "0-7").cpuset("2-3,6")
    assert topology.container_cpus(tmp_path) == {2, 3, 6}


def test_container_cpus_fall_back_to_cgroup_v1(tmp_path: Path) -> None:
    v1 = tmp_path / "sys/fs/cgroup/cpuset/cpuset.effective_cpus"
    v1.parent.mkdir(parents=True)
    v1.write_text("0,4-5\n")
    FakeSys(tmp_path / "sys").node(0, "0-7")
    assert topology.container_cpus(tmp_path) == {0, 4, 5}


def test_container_cpus_without_a_cgroup_are_the_schedulers(tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").node(0, "0-7").cpuset("")
    assert topology.container_cpus(tmp_path) == frozenset(os.sched_getaffinity(0))


def test_visible_device_lists_are_read_one_way() -> None:
    assert topology.visible_entries(" 3, GPU-ab ,,1 ") == ["3", "GPU-ab", "1"]
    assert topology.visible_entries("") == []


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3", {0, 1, 2, 3}), ("0-1,8,10-11", {0, 1, 8, 10, 11}), ("5", {5}), ("", set())],
)
def test_cpulist_round_trip(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("0000:3B:00.0", "0000:3b:00.0"),
        ("af:00.0", "0000:af:00.0"),
        # PCI domains above ffff (VMD, some hypervisors): NVML pads to 8 digits, sysfs writes 5.
        ("00010000:18:00.0", "10000:18:00.0"),
        ("10000:18:00.0", "10000:18:00.0"),
    ],
)
def test_bus_ids_are_normalised_to_the_sysfs_form(raw: str, norm: str) -> None:
    assert normalize_bus_id(raw) == norm


def _host_with_two_gpus(root: Path) -> list[str]:
    """A filesystem root whose /sys lists two GPUs, as a container's /sys lists the host's."""
    fs = FakeSys(root / "sys").node(0, "0-7").online("0-7")
    ids = [bus(0), bus(1)]
    for b in ids:
        fs.gpu(b, 0, "0-7")
    (root / "dev").mkdir()
    return ids


def test_without_nvml_a_gpu_counts_only_with_its_device_node(tmp_path: Path) -> None:
    # No NVIDIA runtime: /sys shows the host's GPUs, /dev has none of them: no GPU.
    ids = _host_with_two_gpus(tmp_path)
    assert read_topology(tmp_path, environ={}).gpus == ()
    # Given GPU 1 only (its node, no /proc of the driver): the driver numbers GPUs in bus order.
    nvidia_device(tmp_path, 1)
    assert [g.bus_id for g in read_topology(tmp_path, environ={}).gpus] == [ids[1]]
    nvidia_device(tmp_path, 0)
    topo = read_topology(tmp_path, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert [(g.index, g.bus_id) for g in topo.gpus] == [(0, ids[1])]


def test_the_drivers_proc_maps_device_minors_to_bus_ids(tmp_path: Path) -> None:
    ids = _host_with_two_gpus(tmp_path)
    # The driver says bus 0 is minor 1 and bus 1 is minor 0; only /dev/nvidia1 was given.
    nvidia_device(tmp_path, 1, ids[0])
    info = tmp_path / "proc/driver/nvidia/gpus" / ids[1] / "information"
    info.parent.mkdir(parents=True)
    info.write_text("Device Minor: \t 0\n")
    assert [g.bus_id for g in read_topology(tmp_path, environ={}).gpus] == [ids[0]]


def test_a_copy_of_sys_alone_is_trusted_and_rig_train_without_gpus_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def launched(*argv: Any) -> None:
        raise AssertionError(f"launched {argv}")

    monkeypatch.setattr(os, "execvpe", launched)
    ids = _host_with_two_gpus(tmp_path)
    # `rig plan --sysfs-root COPY`: another machine's /sys, no /dev to check against.
    assert [g.bus_id for g in read_topology(tmp_path / "sys", environ={}).gpus] == ids
    assert cli.main(["plan", "--sysfs-root", str(tmp_path / "sys"), "--gpus", "2"]) == 0
    capsys.readouterr()
    # The same /sys under a root whose /dev has no GPU: our no-GPU line, nothing planned.
    assert cli.main(["train", "--sysfs-root", str(tmp_path), "--gpus", "2", "data=x.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR rig: no GPU is visible"), err


def test_visible_devices_by_uuid_and_errors() -> None:
    buses = ["0000:18:00.0", "0000:2a:00.0"]
    uuids = {buses[0]: "GPU-aaaa-1111", buses[1]: "GPU-bbbb-2222"}
    assert apply_visible_devices(buses, "GPU-bbbb,0", uuids) == [buses[1], buses[0]]
    assert apply_visible_devices(buses, "1,7,0", uuids) == [buses[1]]  # CUDA stops at a bad index
    with pytest.raises(RigError, match="UUID"):
        apply_visible_devices(buses, "GPU-cccc", uuids)
    with pytest.raises(RigError, match="twice"):
        apply_visible_devices(buses, "0,0", uuids)


def test_unknown_or_duplicate_bus_ids_are_one_line_errors(tmp_path: Path) -> None:
    FakeSys(tmp_path).node(0, "0-3").gpu(bus(0), 0, "0-3")
    with pytest.raises(RigError, match="not under"):
        read_topology(tmp_path, ["0000:99:00.0"], environ={})
    with pytest.raises(RigError, match="twice"):
        read_topology(tmp_path, [bus(0), bus(0)], environ={})
    with pytest.raises(RigError, match="not a PCI bus id"):
        read_topology(tmp_path, ["gpu0"], environ={})


def test_sysfs_root_may_be_a_filesystem_root(tmp_path: Path) -> None:
    FakeSys(tmp_path / "sys").node(0, "0-3").online("0-3").gpu(bus(0), 0, "0-3")
    assert read_topology(tmp_path, [bus(0)], environ={}).gpus[0].local_cpus == {0, 1, 2, 3}


def test_nvml_lists_the_gpus_in_bus_order_and_shuts_down() -> None:
    fake = FakeNvml(
        [FakeGpu(uuid="GPU-b", bus_id="00000000:18:00.0"), FakeGpu(uuid="GPU-a", bus_id="00000000:17:00.0")]
    )
    assert nvml_gpus(fake) == [("0000:17:00.0", "GPU-a"), ("0000:18:00.0", "GPU-b")]
    assert not fake.initialised
    assert nvml_gpus(FakeNvml(init_error=9)) is None


def test_an_nvml_error_on_one_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    class LostGpu(FakeNvml):
        def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)

    fake = LostGpu([FakeGpu(uuid="GPU-a")])
    with pytest.raises(RigError, match=r"cannot read this container's GPUs \(NVMLError: NVML error 15\)"):
        nvml_gpus(fake)
    assert not fake.initialised


APPTAINER = {"APPTAINER_CONTAINER": "/scratch/yolo-rig.sif"}


def test_under_apptainer_without_nv_the_hosts_device_files_are_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Apptainer binds the host's /dev: every GPU's device file is there, but without --nv none of
    the driver's libraries (no NVML): no GPU, and the line says --nv; under Docker the same files
    would be GPUs (the runtime brings both)."""
    ids = _host_with_two_gpus(tmp_path)
    for minor in (0, 1):
        nvidia_device(tmp_path, minor)
    monkeypatch.setattr(topology, "_is_live", lambda _sysfs: True)
    monkeypatch.setattr(topology, "nvml_gpus", lambda: None)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: frozenset(range(8)))
    topo = read_topology(tmp_path, environ=APPTAINER)
    assert topo.gpus == () and topo.without_driver == 2
    with pytest.raises(RigError, match=r"2 GPU\(s\) are on this machine .* `apptainer run --nv`"):
        select_gpus(parse_gpus("all"), topo)
    assert [g.bus_id for g in read_topology(tmp_path, environ={}).gpus] == ids


@pytest.mark.parametrize(
    ("gpus", "visible", "used"),
    [
        ("all", "1,3", [1, 3]),  # Slurm's --gres: the job's two of the node's four
        ("1", "1,3", [1]),  # one GPU: the job's first
        ("2", None, [0, 1]),  # --gpus 2 of the node's four, no Slurm
        ("0,3", None, [0, 3]),
    ],
)
def test_under_apptainer_with_nv_the_gpus_are_nvmls_within_the_jobs_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: str, visible: str | None, used: list[int]
) -> None:
    """--nv brings NVML, which lists the node's GPUs (no device cgroup under Apptainer alone); the
    job's CUDA_VISIBLE_DEVICES (Slurm's, passed in from the host) picks among them."""
    fs = FakeSys(tmp_path / "sys").node(0, "0-7").online("0-7")
    ids = [bus(i) for i in range(4)]
    for b in ids:
        fs.gpu(b, 0, "0-7")
    monkeypatch.setattr(topology, "_is_live", lambda _sysfs: True)
    monkeypatch.setattr(topology, "nvml_gpus", lambda: [(b, f"GPU-{i}") for i, b in enumerate(ids)])
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: frozenset(range(8)))
    env = {**APPTAINER, **({"CUDA_VISIBLE_DEVICES": visible} if visible else {})}
    topo = read_topology(tmp_path, environ=env)
    chosen = select_gpus(parse_gpus(gpus), topo)
    assert [topo.gpus[i].bus_id for i in chosen] == [ids[i] for i in used]  # the host's GPUs, by number
