"""`rig train device=cpu --cpu-ranks N`: CPU ranks through the same plan as GPU ranks.

The plan is decided from fake /sys trees; the commands run in-process with exec recorded.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.hardware.topology import format_cpulist, read_topology
from rig.launch import binding, job

from tests.helpers.fakesys import FakeSys, bus


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def record(file: str, argv: list[str], env: Any) -> None:
        calls.append(list(argv))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvpe", record)
    for name in (
        "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES",
        job.CPU_RANKS_ENV,
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    return calls


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A 2-socket box copy, 8 CPUs per socket, 2 GPUs (which device=cpu leaves alone)."""
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").node(1, "8-15").online("0-15")
    fs.gpu(bus(0), 0, "0-7").gpu(bus(1), 1, "8-15")
    return root


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


def _dry(box: Path, *argv: str) -> list[str]:
    return ["train", "--sysfs-root", str(box), "--dry-run", *argv]


def _split(out: str) -> tuple[dict[str, str], list[str]]:
    printed = shlex.split(out.strip().splitlines()[-1])
    env = dict(a.split("=", 1) for a in printed[1 : printed.index(sys.executable)])
    return env, printed[len(env) + 1 :]


def test_cpu_ranks_run_through_torchrun_the_binder_and_the_trainer(
    box: Path, execs: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _dry(box, "--cpu-ranks", "4", "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}/r")
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "INFO launch: world: 4 ranks = 1 node x 4 ranks per node (cpu, gloo)" in captured.err
    env, cmd = _split(captured.out)
    assert cmd[:4] == [sys.executable, "-P", "-m", "rig.launch.torchrun"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4"
    assert cmd[cmd.index("--master-addr") + 1] == "127.0.0.1"
    plan = binding.from_json(cmd[cmd.index("--plan") + 1])
    assert [(format_cpulist(r.cpus), r.mem_node, r.gpu_index) for r in plan] == [
        ("0-3", 0, None), ("4-7", 0, None), ("8-11", 1, None), ("12-15", 1, None),
    ]  # fmt: skip
    program = cmd[cmd.index("--") + 1 :]
    assert program[:4] == [sys.executable, "-P", "-m", "rig.launch.trainer"]
    args = dict(a.split("=", 1) for a in program[4:])
    # The batch split as for GPUs: Ultralytics' default 16 per rank, times the world.
    assert args["device"] == "cpu" and args["batch"] == "64"
    assert "batch=64: Ultralytics' default 16 per GPU x 4 GPUs" in captured.err
    assert env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")) is not None
    assert "RIG_RUN_GPUS" not in env and execs == []


def test_cpu_ranks_from_the_environment_and_across_nodes(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {job.CPU_RANKS_ENV: "2", "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=8")) == 0
    captured = capsys.readouterr()
    assert "INFO launch: world: 4 ranks = 2 nodes x 2 ranks per node (cpu, gloo)" in captured.err
    _, cmd = _split(captured.out)
    assert cmd[cmd.index("--rdzv-backend") + 1] == "static" and cmd[cmd.index("--node-rank") + 1] == "1"
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2"
    # The batch divides by the world (4), not by this node's 2 ranks.
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=6")) == 1
    assert "not divisible by the 4 ranks" in capsys.readouterr().err
    # --cpu-ranks wins over the environment.
    one = _dry(box, "--cpu-ranks", "1", "device=cpu", "data=x.yaml", "model=m.yaml", "batch=8")
    assert cli.main(one) == 0
    assert "world: 2 ranks = 2 nodes x 1 rank per node (cpu, gloo)" in capsys.readouterr().err


def test_one_cpu_rank_on_one_node_is_the_trainer_alone(
    box: Path, execs: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}")) == 0
    captured = capsys.readouterr()
    assert "world: 1 rank = 1 node x 1 rank per node (cpu, one process)" in captured.err
    env, cmd = _split(captured.out)
    assert cmd[:4] == [sys.executable, "-P", "-m", "rig.launch.trainer"]
    args = dict(a.split("=", 1) for a in cmd[4:])
    assert args["device"] == "cpu" and "batch" not in args  # one rank: Ultralytics' own default
    assert env["RIG_RUN_DIR"] == str(tmp_path / "train")


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--cpu-ranks", "0", "device=cpu"], {}, "--cpu-ranks 0: give the number of CPU ranks per node"),
        (["--cpu-ranks", "two", "device=cpu"], {}, "--cpu-ranks two: give the number of CPU ranks"),
        (["device=cpu"], {"RIG_CPU_RANKS": "x"}, "RIG_CPU_RANKS='x': give the number of CPU ranks per node"),
        (["--cpu-ranks", "2"], {}, "--cpu-ranks 2: trains on the CPU but the run is on GPUs: add device=cpu"),
        (["--cpu-ranks", "2", "device=0,1"], {}, "--cpu-ranks 2: trains on the CPU but the run is on GPUs"),
        (["--cpu-ranks", "2", "--gpus", "2", "device=cpu"], {}, "--gpus 2: device=cpu is given too"),
        (["device=0"], {"RIG_CPU_RANKS": "2"}, "unset RIG_CPU_RANKS"),
        (["--cpu-ranks", "2", "device=mps"], {}, "device=mps: trains in one process"),
    ],
)
def test_bad_cpu_ranks_are_one_line_and_launch_nothing(
    box: Path,
    execs: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environ: dict[str, str],
    message: str,
) -> None:
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["train", "--sysfs-root", str(box), *argv, "data=x.yaml", "model=m.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR rig: ") and message in err[0], err
    assert execs == []
