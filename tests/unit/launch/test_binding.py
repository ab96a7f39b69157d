"""The binding plan (rig.launch.binding) on fake sysfs trees: GPU ranks, CPU ranks, `rig plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.hardware.topology import format_cpulist, parse_cpulist, read_topology
from rig.launch import binding

from tests.helpers.fakesys import FakeSys, bus


def _plan(
    root: Path, n: int, ids: list[str] | None = None, env: dict[str, str] | None = None
) -> binding.Plan:
    return binding.make_plan(read_topology(root, ids, environ=env or {}), n)


def _rows(plan: binding.Plan) -> list[tuple[str | None, int, str, int | None]]:
    return [(r.gpu_bus_id, r.numa_node, format_cpulist(r.cpus), r.mem_node) for r in plan.ranks]


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


def _cpus(plan: binding.Plan) -> list[tuple[str, int, int | None]]:
    return [(format_cpulist(r.cpus), r.numa_node, r.mem_node) for r in plan.ranks]


@pytest.mark.parametrize(
    ("nodes", "cpuset", "nranks", "expected"),
    [
        # As many ranks as nodes: a node each, memory preferred there.
        ({0: "0-7", 1: "8-15"}, None, 2, [("0-7", 0, 0), ("8-15", 1, 1)]),
        # More: each node's CPUs split among its block of ranks.
        ({0: "0-7", 1: "8-15"}, None, 4, [("0-3", 0, 0), ("4-7", 0, 0), ("8-11", 1, 1), ("12-15", 1, 1)]),
        # Fewer: whole nodes, the kernel's memory policy.
        ({0: "0-7", 1: "8-15"}, None, 1, [("0-15", -1, None)]),
        # The container's cpuset: only allowed CPUs, nodes in proportion to what is allowed there.
        ({0: "0-7", 1: "8-15"}, "4-15", 3, [("4-7", 0, 0), ("8-11", 1, 1), ("12-15", 1, 1)]),
        ({0: "0-7", 1: "8-15"}, "0-3", 2, [("0-1", 0, 0), ("2-3", 0, 0)]),
        # No NUMA information: the allowed CPUs split evenly.
        ({}, None, 2, [("0-7", -1, None), ("8-15", -1, None)]),
    ],
)
def test_cpu_plan_shares_the_numa_nodes_then_the_cores(
    tmp_path: Path, nodes: dict[int, str], cpuset: str | None, nranks: int, expected: list[Any]
) -> None:
    fs = FakeSys(tmp_path).online("0-15")
    for n, cpus in nodes.items():
        fs.node(n, cpus)
    if cpuset:
        fs.cpuset(cpuset)
    plan = binding.cpu_plan(read_topology(tmp_path, [], environ={}), nranks)
    assert _cpus(plan) == expected
    assert [r.local_rank for r in plan.ranks] == list(range(nranks))
    assert all(r.gpu_bus_id is None and r.gpu_index is None for r in plan.ranks)


def test_cpu_plan_never_splits_a_core(tmp_path: Path) -> None:
    FakeSys(tmp_path).node(0, "0-7").online("0-7").siblings("0,4", "1,5", "2,6", "3,7")
    plan = binding.cpu_plan(read_topology(tmp_path, [], environ={}), 2)
    assert [format_cpulist(r.cpus) for r in plan.ranks] == ["0-1,4-5", "2-3,6-7"]
