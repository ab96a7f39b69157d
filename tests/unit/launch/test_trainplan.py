"""`rig train`/`rig launch` decisions: bad input, dry runs, the run directory, GPU choice, multi-node.

The commands run in-process with exec replaced by a recorder, so "nothing launched" is checked
directly.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.hardware.topology import format_cpulist
from rig.launch import binding, rundir, trainplan
from rig.yolo import tuning, ultra
from rig.yolo.nodecache import prepare

from tests.helpers.fakesys import FakeSys, bus
from tools import ultralytics_releases


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, str]:
    """A 2-socket box copy with 4 GPUs, 2 per socket, 8 CPUs per socket."""
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").node(1, "8-15").online("0-15")
    ids = [bus(i) for i in range(4)]
    for i, b in enumerate(ids):
        fs.gpu(b, i // 2, "0-7" if i < 2 else "8-15")
    return root, ",".join(ids)


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def record(file: str, argv: list[str], env: Any) -> None:
        calls.append(list(argv))
        raise SystemExit(0)

    monkeypatch.setattr(os, "execvpe", record)
    for name in (
        "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "PET_NNODES",
        "RDZV_ID", trainplan.CPU_RANKS_ENV,
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    return calls


def _train(tree: tuple[Path, str], *argv: str) -> list[str]:
    root, ids = tree
    return ["train", "--sysfs-root", str(root), "--gpu-bus-ids", ids, *argv]


@pytest.mark.parametrize(
    ("gpus", "batch", "message"),
    [
        ("5", "16", "--gpus 5: only 4 GPU(s) are visible"),
        ("0", "16", "at least one GPU is needed"),
        ("-1", "16", "at least one GPU is needed"),
        ("two", "16", "--gpus two: not a number"),
        ("1,1", "16", "names GPU 1 twice"),
        ("0,9", "16", "GPU id 9 is not visible"),
        ("3", "16", "batch=16: not divisible by the 3 ranks; use a multiple of 3, e.g. 15 or 18"),
        ("2", "-1", "AutoBatch"),
    ],
)
def test_bad_input_is_one_line_and_launches_nothing(
    tree: tuple[Path, str],
    execs: list[list[str]],
    capsys: pytest.CaptureFixture[str],
    gpus: str,
    batch: str,
    message: str,
) -> None:
    code = cli.main(_train(tree, "--gpus", gpus, "data=x.yaml", f"batch={batch}"))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err == [err[0]] and err[0].startswith("ERROR rig: ") and message in err[0]
    assert execs == []


@pytest.mark.parametrize(
    ("args_from", "gpus", "batch", "message"),
    [("", "9", "16", "--gpus 9: only 4 GPU(s) are visible"),
     ("make", "9", "16", "GPUS=9: only 4 GPU(s) are visible"),
     ("", "2", "7", "batch=7: not divisible by the 2 ranks"),
     ("make", "2", "7", "BATCH=7: not divisible by the 2 ranks"),
     ("make", "two", "16", "GPUS=two: not a number; use a count (2)")],
)  # fmt: skip
def test_errors_name_what_the_user_typed(
    tree: tuple[Path, str],
    execs: list[list[str]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args_from: str,
    gpus: str,
    batch: str,
    message: str,
) -> None:
    # `make train GPUS=9` runs `rig train --gpus 9` with RIG_ARGS_FROM=make (Makefile `train`).
    monkeypatch.setenv("RIG_ARGS_FROM", args_from)
    assert cli.main(_train(tree, "--gpus", gpus, "data=x.yaml", f"batch={batch}")) == 1
    assert message in capsys.readouterr().err


def test_no_gpu_names_the_compose_reservation_and_the_toolkit(
    tmp_path: Path, execs: list[list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    FakeSys(tmp_path).node(0, "0-3").online("0-3")
    assert cli.main(["train", "--sysfs-root", str(tmp_path), "--gpus", "2", "data=x.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reservations" in err[0] and "NVIDIA container toolkit" in err[0]
    assert "device=cpu" in err[0]
    assert execs == []


def test_dry_run_prints_the_exact_torchrun_command(
    tree: tuple[Path, str], execs: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = tree[1]
    runs = tmp_path / "runs"
    argv = _train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=yolo11n.yaml", "batch=16")
    assert cli.main([*argv, f"project={runs}", "workers=3"]) == 0
    printed = shlex.split(capsys.readouterr().out.strip())
    assert execs == []
    assert printed[0] == "env"
    env = dict(a.split("=", 1) for a in printed[1 : printed.index(sys.executable)])
    cmd = printed[len(env) + 1 :]
    assert cmd[:4] == [sys.executable, "-P", "-m", "rig.launch.torchrun"]  # -P: not the current folder
    binder = cmd.index("--no-python")  # torchrun's own `python -u -m` would put it first on sys.path
    assert cmd[binder + 1 : binder + 5] == [sys.executable, "-P", "-m", "rig.launch.binder"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and "--standalone" not in cmd
    # One node: a static store on the loopback, on a port rig.launch.torchrun picks (0).
    assert cmd[cmd.index("--master-addr") + 1 :][:3] == ["127.0.0.1", "--master-port", "0"]
    assert cmd[cmd.index("--gpus-per-rank") + 1] == "one"  # each rank sees its own GPU alone
    plan = binding.from_json(cmd[cmd.index("--plan") + 1])
    assert [(r.gpu_bus_id, r.cpus, r.mem_node) for r in plan] == [
        (ids.split(",")[0], (0, 1, 2, 3), 0),
        (ids.split(",")[1], (4, 5, 6, 7), 0),
    ]
    program = cmd[cmd.index("--") + 1 :]
    assert program[:4] == [sys.executable, "-P", "-m", "rig.launch.trainer"]
    args = dict(a.split("=", 1) for a in program[4:])
    assert args["device"] == "0,1" and args["batch"] == "16" and args["workers"] == "3"
    assert args["project"] == str(runs) and args["name"] == "train" and args["exist_ok"] == "True"
    assert env["RIG_RUN_DIR"] == str(runs / "train")
    assert env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")) is not None
    assert not runs.exists()  # a dry run leaves nothing behind


def test_gpu_ids_and_device_choose_the_same_gpus(
    tree: tuple[Path, str], execs: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--dry-run", "data=x.yaml", "model=m.yaml", f"project={tmp_path}"]
    assert cli.main(_train(tree, "--gpus", "3,0", *base)) == 0
    by_ids = capsys.readouterr().out
    assert cli.main(_train(tree, *base, "device=3,0")) == 0
    assert capsys.readouterr().out == by_ids
    assert "device=3,0" in by_ids
    # Telemetry on rank 0 samples exactly these GPUs, named as the user named them.
    env = dict(a.split("=", 1) for a in shlex.split(by_ids)[1 : shlex.split(by_ids).index(sys.executable)])
    ids = tree[1].split(",")
    assert env["RIG_RUN_GPUS"] == f"3={ids[3]},0={ids[0]}"
    plan = binding.from_json(shlex.split(by_ids)[shlex.split(by_ids).index("--plan") + 1])
    assert [r.numa_node for r in plan] == [1, 0]


def test_multi_node_dry_run_uses_a_static_rendezvous(
    tree: tuple[Path, str], execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    env = {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29411", "RDZV_ID": "r1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=m.yaml", "batch=8")) == 0
    cmd = shlex.split(capsys.readouterr().out)
    # Static: torchrun honours --node-rank (c10d orders nodes by host name) and MASTER_ADDR.
    assert cmd[cmd.index("--rdzv-backend") + 1] == "static"
    assert cmd[cmd.index("--master-addr") + 1] == "node0" and cmd[cmd.index("--master-port") + 1] == "29411"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "node0:29411"  # over any PET_RDZV_ENDPOINT
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--node-rank") + 1] == "1"
    # torch's static rendezvous waits 600 s unless told: RIG_RDZV_TIMEOUT, said explicitly.
    assert cmd[cmd.index("--rdzv-conf") + 1] == "timeout=600"
    monkeypatch.setenv("RIG_RDZV_TIMEOUT", "1800")
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=m.yaml", "batch=8")) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[cmd.index("--rdzv-conf") + 1] == "timeout=1800"
    monkeypatch.setenv("RIG_RDZV_TIMEOUT", "5")
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=m.yaml", "batch=8")) == 1
    assert "RIG_RDZV_TIMEOUT='5': use whole seconds between 10 and 86400" in capsys.readouterr().err
    monkeypatch.delenv("RIG_RDZV_TIMEOUT")
    # 2 nodes x 2 GPUs: the batch must divide by 4, not by this node's 2.
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "batch=6")) == 1
    assert "4 ranks" in capsys.readouterr().err


def test_loader_tuning_gets_the_local_ranks_and_the_global_world(
    tree: tuple[Path, str], execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(
        tuning, "decide_for", lambda node, **kw: seen.append({**kw, "nranks": node.nranks}) or []
    )
    for k, v in {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "node0", "RDZV_ID": "r1"}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=m.yaml", "batch=8")) == 0
    assert [(kw["nranks"], kw["rank_batch"]) for kw in seen] == [(2, 2)]  # /dev/shm per node, batch per world


@pytest.mark.parametrize("resume", ["False", "false", "none", ""])
def test_resume_false_trains_like_no_resume(
    tmp_path: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, resume: str
) -> None:
    # resume= is read once (trainargs.resume_of): resume=False is a fresh run, with the demo data by default.
    demo = tmp_path / "demo/data.yaml"
    demo.parent.mkdir()
    demo.write_text("train: images\n")
    monkeypatch.setattr(trainplan, "DEMO_DATA", demo)
    argv = ["train", "--dry-run", "device=cpu", "model=m.yaml", f"project={tmp_path / 'runs'}"]
    assert cli.main([*argv, f"resume={resume}"]) == 0
    program = shlex.split(capsys.readouterr().out)
    args = dict(a.split("=", 1) for a in program[program.index("rig.launch.trainer") + 1 :])
    assert args["data"] == str(demo) and args["name"] == "train"


def test_two_launches_started_at_once_get_two_run_directories(tree: tuple[Path, str], tmp_path: Path) -> None:
    # Real `rig train` processes: each decides and reserves its run directory, then execs torchrun
    # (which fails here, without torch: the directory is what counts). Ultralytics creates the folder
    # only once training starts, seconds later, so both would pick `train` without the reservation.
    runs = tmp_path / "runs"
    root = Path(__file__).resolve().parents[3]
    # The image's Ultralytics is the locked wheel's source here (no torch: it is checked, not imported).
    source = ultralytics_releases.source().parent
    env = {**os.environ, "PYTHONPATH": f"{root / 'entrypoint'}:{source}", "RIG_RUN_DIR": ""}
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "WORLD_SIZE", "RANK"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "rig", *_train(tree, "--gpus", "2", "data=x.yaml", "model=yolo11n.yaml")]
    procs = [
        subprocess.Popen(
            [*argv, f"project={runs}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(4)
    ]
    logs = [p.communicate(timeout=120)[0] for p in procs]
    names = [re.findall(r" name=(\S+)", log) for log in logs]
    assert all(len(n) == 1 for n in names), logs
    assert sorted(n[0] for n in names) == ["train", "train-2", "train-3", "train-4"], logs
    assert sorted(p.name for p in runs.iterdir()) == ["train", "train-2", "train-3", "train-4"]


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A 2-socket box copy, 8 CPUs per socket, 2 GPUs (which device=cpu leaves alone)."""
    root = tmp_path / "sys"
    fs = FakeSys(root).node(0, "0-7").node(1, "8-15").online("0-15")
    fs.gpu(bus(0), 0, "0-7").gpu(bus(1), 1, "8-15")
    return root


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
    env = {
        trainplan.CPU_RANKS_ENV: "2",
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "node0",
        "RDZV_ID": "r",
    }
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
        (
            ["device=cpu"],
            {"RIG_CPU_RANKS": "x"},
            "RIG_CPU_RANKS='x': use a whole number >= 1; the number of CPU",
        ),
        (
            ["device=cpu"],
            {"RIG_CPU_RANKS": "0"},
            "RIG_CPU_RANKS='0': use a whole number >= 1; the number of CPU",
        ),
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


SLURM_TWO_NODES = {
    "SLURM_JOB_NUM_NODES": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NODEID": "0",
    "SLURM_JOB_NODELIST": "gpu[01-02]-ib", "SLURM_STEP_NODELIST": "gpu[01-02]-ib",
}  # fmt: skip


def _slurm_dry(box: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, job: str) -> list[str]:
    for k, v in {**SLURM_TWO_NODES, "SLURM_JOB_ID": job}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=2")) == 0
    return _split(capsys.readouterr().out)[1]


def test_slurm_dry_runs_name_the_master_and_a_port_per_job(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # gpu[01-02]-ib: node 0 is gpu01-ib (Slurm's syntax, the suffix kept); jobs 42 and 43, which may
    # share node 0, get ports 61042 and 61043 (61000 + job id mod 4536, enroot's formula).
    cmds = [_slurm_dry(box, monkeypatch, capsys, job) for job in ("42", "43")]
    assert [c[c.index("--master-addr") + 1] for c in cmds] == ["gpu01-ib", "gpu01-ib"]
    assert [c[c.index("--master-port") + 1] for c in cmds] == ["61042", "61043"]
    monkeypatch.setenv("MASTER_PORT", "29411")  # the job's own wins
    cmd = _slurm_dry(box, monkeypatch, capsys, "42")
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "gpu01-ib:29411"


@pytest.mark.parametrize("addr", ["localhost", "127.0.0.1"])
def test_several_nodes_with_a_loopback_master_is_one_error_line(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, addr: str
) -> None:
    for k, v in {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": addr, "RDZV_ID": "r"}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=2")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ERROR rig: the master address {addr} resolves to 127.0.0.1")
    assert "set MASTER_ADDR to node 0's routable host name or address" in err[0]
    assert execs == []


def test_nodes_started_by_hand_need_a_run_identity(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    for k, v in {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "node0"}.items():
        monkeypatch.setenv(k, v)
    argv = _dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=2", f"project={tmp_path}")
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot agree on a new run directory: set RDZV_ID" in err[0], err
    assert cli.main([*argv, "name=a", "exist_ok=True"]) == 0  # the user's own folder: agreed by name
    monkeypatch.setenv("RDZV_ID", "run1")
    assert cli.main(argv) == 0


def test_the_dry_run_skips_the_two_writing_steps_by_name(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    # The same plan, with and without the steps that write: the run directory's claim and the data's
    # preparation (the dataset check, the label scan and node cache: recorded here, no Ultralytics).
    done: list[str] = []
    monkeypatch.setattr(ultra, "check_dataset", lambda data, task="detect": done.append(f"check {data}"))
    monkeypatch.setattr(prepare, "before_ranks", lambda args, **kw: done.append("prepare") or dict(args))
    argv = ["device=cpu", "--cpu-ranks", "2", "data=x.yaml", "model=m.yaml", f"project={tmp_path}/r"]
    assert cli.main(_dry(box, *argv)) == 0
    dry = _split(capsys.readouterr().out)[1]
    assert done == [] and not (tmp_path / "r").exists()
    with pytest.raises(SystemExit):  # exec: recorded, not run
        cli.main(["train", "--sysfs-root", str(box), *argv])
    assert done == ["check x.yaml", "prepare"] and execs == [dry]
    assert rundir.read_owner(tmp_path / "r/train") is not None  # claimed with an owner file


def test_a_trainer_alone_does_not_inherit_a_schedulers_rank_variables(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    # enroot's PyTorch hook (Pyxis) sets RANK, LOCAL_RANK, WORLD_SIZE and MASTER_* for every task: a
    # trainer without torchrun would take them for a DDP rank's (Ultralytics builds a DistributedSampler).
    hook = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "61007"}
    for k, v in {"SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_ID": "7", **hook}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}")) == 0
    printed = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(a for a in printed if a.startswith("--unset=")) == sorted(f"--unset={k}" for k in hook)
    assert printed[printed.index(sys.executable) + 3] == "rig.launch.trainer"


def test_a_trainjobs_pods_agree_on_a_run_named_for_the_job(
    box: Path, execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """Kubeflow Trainer v2 sets PET_* only; its master `<job>-node-0-0.<job>` names the job, so the pods
    need no RDZV_ID and a restart (resume=auto) finds the run again."""
    env = {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "yolo-train-node-0-0.yolo-train", "PET_MASTER_PORT": "29500",
    }  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for resume in ("resume=False", "resume=auto"):
        argv = _dry(box, "device=cpu", "data=x.yaml", "model=m.yaml", "batch=2", f"project={tmp_path}")
        argv.append(resume)
        assert cli.main(argv) == 0, capsys.readouterr().err
        out = capsys.readouterr().out
        assert " name=train-yolo-train " in out, out
        cmd = _split(out)[1]
        assert cmd[cmd.index("--rdzv-endpoint") + 1] == "yolo-train-node-0-0.yolo-train:29500"
        assert cmd[cmd.index("--node-rank") + 1] == "1"


def _gpu_nodes(tree: tuple[Path, str], fabric_root: Path, caplog: pytest.LogCaptureFixture) -> list[Any]:
    from rig.hardware import fabric
    from rig.launch import job

    env = {"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "node0", "RDZV_ID": "r1"}
    caplog.clear()
    trainplan.plan_train(
        ["data=x.yaml", "model=m.yaml", "batch=8"],
        gpus="2",
        read_topology=lambda: job.topology(str(tree[0]), tree[1]),
        dry_run=True,
        environ=env,
        read_fabric=lambda: fabric.read_fabric(fabric_root, env),
    )
    return [r for r in caplog.records if r.getMessage().startswith("fabric: ")]


def test_a_multi_node_launch_says_its_fabric_and_warns_of_sockets(
    tree: tuple[Path, str], execs: list[list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.helpers.fakesys import fabric_tree

    (sockets,) = _gpu_nodes(tree, fabric_tree(tmp_path / "plain", routes=("eth0",)), caplog)
    assert sockets.levelname == "WARNING"
    assert sockets.getMessage().startswith("fabric: NCCL between nodes over TCP sockets (no InfiniBand/RoCE")
    assert "NCCL picks eth0 (NCCL_SOCKET_IFNAME unset)" in sockets.getMessage()
    ib = fabric_tree(tmp_path / "ib", rdma=("mlx5_0",), uverbs=1, routes=("eth0", "ib0"))
    (rdma,) = _gpu_nodes(tree, ib, caplog)
    assert rdma.levelname == "INFO" and "over InfiniBand/RoCE (mlx5_0 through uverbs0)" in rdma.getMessage()
