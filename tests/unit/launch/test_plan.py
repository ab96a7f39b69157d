"""Topology discovery and the binding plan on fake sysfs trees (host only, no torch)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.errors import RigError
from rig.hardware.topology import (
    apply_visible_devices,
    format_cpulist,
    normalize_bus_id,
    nvml_gpus,
    parse_cpulist,
    read_topology,
)
from rig.launch import binding

from tests.helpers.fakesys import FakeSys, bus, nvidia_device
from tests.scripts.fake_nvml import NVML_ERROR_GPU_IS_LOST, FakeGpu, FakeNvml, NVMLError


def _plan(
    root: Path, n: int, ids: list[str] | None = None, env: dict[str, str] | None = None
) -> binding.Plan:
    return binding.make_plan(read_topology(root, ids, environ=env or {}), n)


def _rows(plan: binding.Plan) -> list[tuple[str | None, int, str, int | None]]:
    return [(r.gpu_bus_id, r.numa_node, format_cpulist(r.cpus), r.mem_node) for r in plan.ranks]


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


def test_workstation_one_socket_two_gpus_split_by_whole_cores(tmp_path: Path) -> None:
    # 8 cores, 16 threads: cpu i and i+8 are one core. A rank must never get half of a core.
    fs = FakeSys(tmp_path).node(0, "0-15").online("0-15")
    fs.siblings(*(f"{i},{i + 8}" for i in range(8)))
    fs.gpu(bus(0), 0, "0-15").gpu(bus(1), 0, "0-15")
    plan = _plan(tmp_path, 2, [bus(0), bus(1)])
    assert _rows(plan) == [(bus(0), 0, "0-3,8-11", 0), (bus(1), 0, "4-7,12-15", 0)]
    assert plan.warnings == ()


def test_two_sockets_eight_gpus_four_per_socket(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path).node(0, "0-15").node(1, "16-31").online("0-31")
    ids = [bus(i) for i in range(8)]
    for i, b in enumerate(ids):
        fs.gpu(b, i // 4, "0-15" if i < 4 else "16-31")
    plan = _plan(tmp_path, 8, ids)
    assert _rows(plan) == [
        (ids[0], 0, "0-3", 0),
        (ids[1], 0, "4-7", 0),
        (ids[2], 0, "8-11", 0),
        (ids[3], 0, "12-15", 0),
        (ids[4], 1, "16-19", 1),
        (ids[5], 1, "20-23", 1),
        (ids[6], 1, "24-27", 1),
        (ids[7], 1, "28-31", 1),
    ]
    # Two ranks on the first two GPUs: both on socket 0, each half of it.
    assert _rows(_plan(tmp_path, 2, ids)) == [(ids[0], 0, "0-7", 0), (ids[1], 0, "8-15", 0)]


def test_amd_style_eight_numa_nodes_one_gpu_each(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path).online("0-63")
    ids = [bus(i) for i in range(8)]
    for n, b in enumerate(ids):
        fs.node(n, f"{8 * n}-{8 * n + 7}").gpu(b, n, f"{8 * n}-{8 * n + 7}")
    plan = _plan(tmp_path, 8, ids)
    assert _rows(plan) == [(ids[n], n, f"{8 * n}-{8 * n + 7}", n) for n in range(8)]


def test_vm_with_numa_node_minus_one(tmp_path: Path) -> None:
    # Cloud VMs report numa_node -1: no memory node to prefer; the CPUs are shared out evenly.
    fs = FakeSys(tmp_path).node(0, "0-7").online("0-7")
    fs.gpu(bus(0), -1, "0-7").gpu(bus(1), -1, None)
    plan = _plan(tmp_path, 2, [bus(0), bus(1)])
    assert _rows(plan) == [(bus(0), -1, "0-3", None), (bus(1), -1, "4-7", None)]
    assert plan.warnings == ()


def test_container_cpuset_on_part_of_one_socket(tmp_path: Path) -> None:
    fs = FakeSys(tmp_path).node(0, "0-15").node(1, "16-31").online("0-31").cpuset("4-11")
    ids = [bus(i) for i in range(4)]
    for i, b in enumerate(ids):
        fs.gpu(b, i // 2, "0-15" if i < 2 else "16-31")
    topo = read_topology(tmp_path, ids, environ={})
    assert topo.allowed_cpus == parse_cpulist("4-11")  # from the copy, never from this machine
    # GPUs 0 and 1 sit on node 0, which the cpuset covers in part: they share what is allowed.
    assert _rows(_plan(tmp_path, 2, ids)) == [(ids[0], 0, "4-7", 0), (ids[1], 0, "8-11", 0)]
    # GPUs 2 and 3 sit on node 1, where the container has no CPU: even split, one warning.
    plan = _plan(tmp_path, 4, ids)
    assert [format_cpulist(r.cpus) for r in plan.ranks] == ["4-5", "6-7", "8-9", "10-11"]
    assert [r.mem_node for r in plan.ranks] == [0, 0, 1, 1]
    assert len(plan.warnings) == 1
    assert ids[2] in plan.warnings[0] and ids[3] in plan.warnings[0] and "cpuset" in plan.warnings[0]


def test_reordered_cuda_visible_devices(tmp_path: Path) -> None:
    # No --gpu-bus-ids: GPUs are found by PCI vendor/class (a NIC is not a GPU), in bus order.
    fs = FakeSys(tmp_path).node(0, "0-7").node(1, "8-15").online("0-15")
    ids = [bus(i) for i in range(4)]
    for i, b in enumerate(ids):
        fs.gpu(b, i // 2, "0-7" if i < 2 else "8-15")
    fs.gpu("0000:05:00.0", 0, "0-7", vendor="0x15b3", cls="0x020000")
    topo = read_topology(tmp_path, environ={"CUDA_VISIBLE_DEVICES": "3,1"})
    assert [(g.index, g.bus_id) for g in topo.gpus] == [(0, ids[3]), (1, ids[1])]
    plan = binding.make_plan(topo, 2)
    assert _rows(plan) == [(ids[3], 1, "8-15", 1), (ids[1], 0, "0-7", 0)]
    assert [g.bus_id for g in read_topology(tmp_path, environ={}).gpus] == ids
    assert read_topology(tmp_path, environ={"CUDA_VISIBLE_DEVICES": ""}).gpus == ()


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


def test_rig_plan_json_from_a_copied_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fs = FakeSys(tmp_path).node(0, "0-15").node(1, "16-31").online("0-31")
    ids = [bus(i) for i in range(4)]
    for i, b in enumerate(ids):
        fs.gpu(b, i // 2, "0-15" if i < 2 else "16-31")
    argv = ["plan", "--json", "--sysfs-root", str(tmp_path), "--gpu-bus-ids", ",".join(ids), "--gpus", "4"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == [
        {
            "local_rank": 0,
            "gpu_bus_id": ids[0],
            "numa_node": 0,
            "cpus": list(range(0, 8)),
            "mem_node": 0,
            "gpu_index": 0,
        },
        {
            "local_rank": 1,
            "gpu_bus_id": ids[1],
            "numa_node": 0,
            "cpus": list(range(8, 16)),
            "mem_node": 0,
            "gpu_index": 1,
        },
        {
            "local_rank": 2,
            "gpu_bus_id": ids[2],
            "numa_node": 1,
            "cpus": list(range(16, 24)),
            "mem_node": 1,
            "gpu_index": 2,
        },
        {
            "local_rank": 3,
            "gpu_bus_id": ids[3],
            "numa_node": 1,
            "cpus": list(range(24, 32)),
            "mem_node": 1,
            "gpu_index": 3,
        },
    ]
    assert cli.main(["plan", *argv[2:]]) == 0  # the table form
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["rank", "gpu", "numa", "cpus", "mem"]
    assert table[3].split()[:4] == ["2", ids[2], "1", "16-23"]


def test_plan_json_round_trips_through_the_binder_format() -> None:
    ranks = [
        binding.RankBinding(0, "0000:18:00.0", 0, (0, 1), 0),
        binding.RankBinding(1, None, -1, (2,), None),
    ]
    assert binding.from_json(binding.to_json(ranks)) == ranks


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
