"""`rig train`/`rig launch` decisions, bad input, the GPU environment, multi-node mapping, the binder.

Host only: the commands are run in-process with exec replaced by a recorder, so "nothing launched"
is checked directly; the binder runs for real in a subprocess.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rig import cli
from rig.errors import RigError
from rig.launch import binding, gpuenv, job, nodes

from tests.launch_fakesys import FakeSys, bus

ENTRYPOINT = Path(__file__).resolve().parents[1] / "entrypoint"


@pytest.fixture(autouse=True)
def _fresh_log_handler() -> Iterator[None]:
    """log.setup binds sys.stderr once per process; each test captures a new one."""
    logger = logging.getLogger("rig")
    logger.handlers.clear()
    logger.propagate = True  # else pytest attaches its own handlers, and setup() keeps them
    yield
    logger.handlers.clear()
    logger.propagate = True


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
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES"):
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
        ("5", "16", "GPUS=5 but only 4 GPU(s) are visible"),
        ("0", "16", "at least one GPU is needed"),
        ("-1", "16", "at least one GPU is needed"),
        ("two", "16", "GPUS=two is not a number"),
        ("1,1", "16", "names GPU 1 twice"),
        ("0,9", "16", "GPU id 9 is not visible"),
        ("3", "16", "BATCH=16 is not divisible by the 3 ranks; use a multiple of 3, e.g. 15 or 18"),
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
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "2" and "--standalone" in cmd
    plan = binding.from_json(cmd[cmd.index("--plan") + 1])
    assert [(r.gpu_bus_id, r.cpus, r.mem_node) for r in plan] == [
        (ids.split(",")[0], (0, 1, 2, 3), 0),
        (ids.split(",")[1], (4, 5, 6, 7), 0),
    ]
    program = cmd[cmd.index("--") + 1 :]
    assert program[:3] == [sys.executable, "-m", "rig.launch.trainer"]
    args = dict(a.split("=", 1) for a in program[3:])
    assert args["device"] == "0,1" and args["batch"] == "16" and args["workers"] == "3"
    assert args["project"] == str(runs) and args["name"] == "train" and args["exist_ok"] == "True"
    assert env["RIG_RUN_DIR"] == str(runs / "train")
    assert env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")) is not None
    assert not runs.exists()  # a dry run leaves nothing behind


def test_run_directory_is_decided_once(tmp_path: Path) -> None:
    assert job.next_run_dir(tmp_path, "train", False) == tmp_path / "train"
    (tmp_path / "train").mkdir()
    (tmp_path / "train2").mkdir()
    assert job.next_run_dir(tmp_path, "train", False) == tmp_path / "train3"
    assert job.next_run_dir(tmp_path, "train", True) == tmp_path / "train"


def test_gpu_ids_and_device_choose_the_same_gpus(
    tree: tuple[Path, str], execs: list[list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--dry-run", "data=x.yaml", "model=m.yaml", f"project={tmp_path}"]
    assert cli.main(_train(tree, "--gpus", "3,0", *base)) == 0
    by_ids = capsys.readouterr().out
    assert cli.main(_train(tree, *base, "device=3,0")) == 0
    assert capsys.readouterr().out == by_ids
    assert "device=3,0" in by_ids
    plan = binding.from_json(shlex.split(by_ids)[shlex.split(by_ids).index("--plan") + 1])
    assert [r.numa_node for r in plan] == [1, 0]


def test_multi_node_dry_run_uses_a_c10d_rendezvous(
    tree: tuple[Path, str], execs: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    for k, v in {"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29411"}.items():
        monkeypatch.setenv(k, v)
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "model=m.yaml", "batch=8")) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[cmd.index("--rdzv-backend") + 1] == "c10d"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "node0:29411"
    assert cmd[cmd.index("--nnodes") + 1] == "2" and cmd[cmd.index("--node-rank") + 1] == "1"
    assert cmd[cmd.index("--rdzv-conf") + 1] == "is_host=0"  # node 0 hosts the store
    # 2 nodes x 2 GPUs: the batch must divide by 4, not by this node's 2.
    assert cli.main(_train(tree, "--gpus", "2", "--dry-run", "data=x.yaml", "batch=6")) == 1
    assert "4 ranks" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (1, 0, None, 29500, "single")),
        (
            {"NNODES": "3", "NODE_RANK": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1234"},
            (3, 2, "a", 1234, "rig"),
        ),
        (
            {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"},
            (2, 1, "job-master-0", 23456, "kubeflow"),
        ),
        (
            {"PET_NNODES": "4", "PET_NODE_RANK": "3", "MASTER_ADDR": "m", "WORLD_SIZE": "4", "RANK": "3"},
            (4, 3, "m", 29500, "kubeflow"),
        ),
        (
            {"WORLD_SIZE": "8", "RANK": "2", "MASTER_ADDR": "m", "PET_NPROC_PER_NODE": "4"},
            (2, 2, "m", 29500, "kubeflow"),
        ),
        (
            {
                "SLURM_JOB_NUM_NODES": "2",
                "SLURM_NODEID": "1",
                "SLURM_JOB_NODELIST": "gpu[07-08]",
                "SLURM_JOB_ID": "9",
            },
            (2, 1, "gpu07", 29500, "slurm"),
        ),
    ],
)
def test_scheduler_variables_become_a_node_spec(env: dict[str, str], expected: tuple[Any, ...]) -> None:
    if env.get("PET_NPROC_PER_NODE"):
        with pytest.raises(RigError, match="not below"):  # RANK=2 of 2 nodes: a mis-set job is refused
            nodes.node_spec(env)
        return
    spec = nodes.node_spec(env)
    assert (spec.nnodes, spec.node_rank, spec.master_addr, spec.master_port, spec.source) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"NNODES": "two"}, "not a number"),
        ({"NNODES": "0"}, "too small"),
        ({"NNODES": "2", "NODE_RANK": "0"}, "no MASTER_ADDR"),
        ({"NNODES": "2", "NODE_RANK": "2", "MASTER_ADDR": "a"}, "not below"),
    ],
)
def test_bad_node_variables_are_one_line_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message):
        nodes.node_spec(env)


def test_slurm_first_host() -> None:
    assert nodes.first_host("gpu[03-05,9],cpu1") == "gpu03"
    assert nodes.first_host("n1,n2") == "n1"


def test_gpu_environment_keeps_user_values_and_says_why() -> None:
    entries = {e.name: e for e in gpuenv.gpu_environment({"NCCL_DEBUG": "INFO"}, threads=6)}
    assert entries["CUDA_DEVICE_ORDER"].value == "PCI_BUS_ID"
    assert entries["OMP_NUM_THREADS"].value == "6" and not entries["OMP_NUM_THREADS"].user_set
    assert entries["MKL_THREADING_LAYER"].value == "GNU"
    assert entries["PYTORCH_CUDA_ALLOC_CONF"].value == "expandable_segments:True"
    assert entries["TORCH_NCCL_ASYNC_ERROR_HANDLING"].value == "1"
    assert entries["NCCL_DEBUG"].value == "INFO" and entries["NCCL_DEBUG"].user_set
    assert all(e.reason for e in entries.values())
    # What rig set once (e.g. in `rig exec`) it may resize later; what the user set it never touches.
    once = gpuenv.updated({"NCCL_DEBUG": "INFO"}, threads=16)
    again = gpuenv.updated(once, threads=4)
    assert again["OMP_NUM_THREADS"] == "4" and again["NCCL_DEBUG"] == "INFO"
    assert gpuenv.updated({"OMP_NUM_THREADS": "3"}, threads=4)["OMP_NUM_THREADS"] == "3"


def test_rig_env_prints_every_variable_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.delenv(gpuenv.MARKER, raising=False)
    assert cli.main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("NCCL_DEBUG=INFO") and "set by you" in line for line in lines)
    assert any(line.startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID") and "rig default" in line for line in lines)
    assert cli.main(["env", "--json"]) == 0
    assert {e["name"] for e in json.loads(capsys.readouterr().out)} >= {
        "OMP_NUM_THREADS",
        "MKL_THREADING_LAYER",
    }


PROBE = (
    "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)), "
    "'omp': os.environ.get('OMP_NUM_THREADS'), 'rig_cpus': os.environ.get('RIG_CPUS')}))"
)


def _bind(local_rank: int, plan: list[binding.RankBinding], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ENTRYPOINT), "LOCAL_RANK": str(local_rank), **env}
    full.pop("OMP_NUM_THREADS", None)
    argv = [
        sys.executable,
        "-m",
        "rig.launch.binder",
        "--plan",
        binding.to_json(plan),
        "--",
        sys.executable,
        "-c",
        PROBE,
    ]
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60, check=False)


def test_binder_applies_its_ranks_cpus_then_execs() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    plan = [binding.RankBinding(i, None, -1, (cpu,), None) for i, cpu in enumerate(allowed[:2])]
    last = len(plan) - 1
    result = _bind(last, plan)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"cpus": [allowed[last]], "omp": "1", "rig_cpus": str(allowed[last])}
    off = _bind(last, plan, NUMA_BINDING="off")
    assert json.loads(off.stdout)["cpus"] == allowed and "NUMA_BINDING=off" in off.stderr


def test_binder_memory_policy_applies_or_warns_once_with_the_fix() -> None:
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    result = _bind(0, [binding.RankBinding(0, None, 0, allowed, 0)])
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    # Either the kernel took MPOL_PREFERRED (CAP_SYS_NICE or no seccomp), or one warning says how.
    assert warnings == [] or (len(warnings) == 1 and "cap_add: [SYS_NICE]" in warnings[0])
    assert json.loads(result.stdout)["cpus"] == list(allowed)


class _FakeUltralyticsTrainer:
    """What rig's trainer class relies on: world_size from `device`, callbacks, validate/final_eval."""

    def __init__(self, devices: int) -> None:
        self.world_size = devices
        self.callbacks: list[str] = []
        self.metrics, self.fitness = {"m": 1.0}, 0.5

    def add_callback(self, event: str, _callback: Any) -> None:
        self.callbacks.append(event)

    def validate(self) -> str:
        return "validated"

    def final_eval(self) -> str:
        return "final"


def test_trainer_uses_the_global_world_size_and_skips_validation_when_stopping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rig.launch import trainer

    cls = trainer.rig_trainer_class(_FakeUltralyticsTrainer)
    monkeypatch.setenv("WORLD_SIZE", "8")  # 2 nodes x 4 GPUs; `device` lists this node's 4
    t = cls(4)
    assert t.world_size == 8 and t.callbacks == ["on_train_batch_end"]
    assert cls(1).world_size == 8  # one GPU per node is still DDP across the nodes
    assert cls(0).world_size == 0  # device=cpu: Ultralytics never runs DDP on the CPU
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert cls(1).world_size == 1
    assert t.validate() == "validated" and t.final_eval() == "final"
    t.rig_stopping = True  # a SIGTERM grace period has no room for a validation pass
    assert t.validate() == ({"m": 1.0}, 0.5) and t.final_eval() is None
    assert trainer.parse_args(
        ["epochs=3", "lr0=0.5", "resume=True", "name=2024", "cache=none", "device=0"]
    ) == {
        "epochs": 3,
        "lr0": 0.5,
        "resume": True,
        "name": "2024",
        "cache": None,
        "device": "0",
    }


class _FakeCheckpointingTrainer:
    """Ultralytics 8.4.190 BaseTrainer's epoch end, checkpoints and resume, with pickle for torch."""

    def __init__(self, wdir: Path, epochs: int, resume: bool = False) -> None:
        self.world_size, self.resume, self.epochs = 0, resume, epochs
        self.args = SimpleNamespace(model=str(wdir / "last.pt"))
        self.wdir, self.last, self.best = wdir, wdir / "last.pt", wdir / "best.pt"
        self.csv = wdir / "results.csv"
        self.epoch = self.start_epoch = 0
        self.save_period = 1
        self.metrics: dict[str, float] = {"mAP": 0.0}  # _setup_train's zeros on rank 0
        self.fitness: float | None = None
        self.best_fitness: float | None = None
        self.stop = False

    def add_callback(self, event: str, _callback: Any) -> None:
        pass

    def validate(self) -> tuple[dict[str, float], float]:
        fitness = 0.1 * (self.epoch + 1)
        if self.best_fitness is None or self.best_fitness < fitness:
            self.best_fitness = fitness
        return {"mAP": fitness}, fitness

    def save_metrics(self, metrics: dict[str, float]) -> None:
        with self.csv.open("a") as f:
            f.write(f"{self.epoch + 1},{metrics['mAP']}\n")

    def save_model(self) -> bool:
        ckpt = {"epoch": self.epoch, "best_fitness": self.best_fitness}
        blob = pickle.dumps({**ckpt, "train_metrics": {**self.metrics, "fitness": self.fitness}})
        self.last.write_bytes(blob)
        if self.best_fitness == self.fitness:
            self.best.write_bytes(blob)
        if (self.save_period > 0) and (self.epoch % self.save_period == 0):
            (self.wdir / f"epoch{self.epoch}.pt").write_bytes(blob)
        return True

    def _load_checkpoint_state(self, ckpt: dict[str, Any]) -> None:
        self.best_fitness = ckpt["best_fitness"]

    def resume_training(self, ckpt: dict[str, Any] | None) -> None:
        if ckpt is None or not self.resume:
            return
        start_epoch = ckpt.get("epoch", -1) + 1
        assert 0 < start_epoch < self.epochs, "nothing to resume"
        self._load_checkpoint_state(ckpt)
        self.start_epoch = start_epoch

    def fit(self, stop_in: int | None = None) -> None:
        """_do_train on rank 0, rig's batch-end callback setting the stop flag in epoch stop_in."""
        self.resume_training(pickle.loads(self.last.read_bytes()) if self.resume else None)
        for epoch in range(self.start_epoch, self.epochs):
            self.epoch = epoch
            if epoch == stop_in:
                self.stop = self.rig_stopping = True
            self.metrics, self.fitness = self.validate()
            self.save_metrics(metrics={**self.metrics})
            self.save_model()
            if self.stop:
                return


def _ckpt(path: Path) -> dict[str, Any]:
    ckpt: dict[str, Any] = pickle.loads(path.read_bytes())
    return ckpt


def _results_epochs(wdir: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in (wdir / "results.csv").read_text().splitlines()]


@pytest.mark.parametrize(("epochs", "stop_in"), [(3, 0), (3, 1), (3, 2), (1, 0)])
def test_a_stop_mid_epoch_keeps_nothing_of_it_and_resume_runs_it_again(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    epochs: int,
    stop_in: int,
) -> None:
    from rig.launch import trainer

    monkeypatch.delenv("RANK", raising=False)

    cls = trainer.rig_trainer_class(_FakeCheckpointingTrainer)
    t = cls(tmp_path, epochs)
    t.fit(stop_in=stop_in)
    last = _ckpt(tmp_path / "last.pt")
    assert last["epoch"] == stop_in - 1 and trainer.stopped_mid_epoch(last)
    assert (tmp_path / "results.csv").exists() == (stop_in > 0)
    assert stop_in == 0 or _results_epochs(tmp_path) == list(range(1, stop_in + 1))
    assert sorted(p.name for p in tmp_path.glob("epoch*.pt")) == [f"epoch{e}.pt" for e in range(stop_in)]
    if stop_in == 0:
        assert not (tmp_path / "best.pt").exists()  # None == None: Ultralytics would call it the best
    else:
        best = _ckpt(tmp_path / "best.pt")
        assert best["epoch"] == stop_in - 1 and not trainer.stopped_mid_epoch(best)
    assert (t.epoch, t.best, t.save_period, list(t.metrics)) == (stop_in, tmp_path / "best.pt", 1, ["mAP"])

    caplog.set_level(logging.INFO, logger="rig")
    resumed = cls(tmp_path, epochs, resume=True)
    resumed.fit()
    assert resumed.start_epoch == stop_in
    assert [r.getMessage() for r in caplog.records if r.name == "rig.trainer"] == [
        f"{tmp_path / 'last.pt'} was saved by a stop mid-epoch: running epoch {stop_in + 1}/{epochs} again"
    ]
    assert _results_epochs(tmp_path) == list(range(1, epochs + 1))
    assert _ckpt(tmp_path / "last.pt")["epoch"] == epochs - 1
    assert not trainer.stopped_mid_epoch(_ckpt(tmp_path / "last.pt"))


def test_resume_of_other_checkpoints_is_ultralytics_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rig.launch import trainer

    caplog.set_level(logging.INFO, logger="rig")
    cls = trainer.rig_trainer_class(_FakeCheckpointingTrainer)
    cls(tmp_path, 3).fit()
    assert not trainer.stopped_mid_epoch(_ckpt(tmp_path / "last.pt"))
    with pytest.raises(AssertionError, match="nothing to resume"):
        cls(tmp_path, 3, resume=True).fit()  # finished
    (tmp_path / "last.pt").write_bytes(pickle.dumps({"epoch": -1, "best_fitness": 0.3, "train_metrics": {}}))
    with pytest.raises(AssertionError, match="nothing to resume"):
        cls(tmp_path, 3, resume=True).fit()  # stripped by final_eval: epoch -1, but not a stop's
    (tmp_path / "last.pt").write_bytes(pickle.dumps({"epoch": 0, "best_fitness": 0.1, "train_metrics": {}}))
    resumed = cls(tmp_path, 3, resume=True)
    resumed.fit()
    assert resumed.start_epoch == 1
    assert not [r for r in caplog.records if r.name == "rig.trainer"]


def test_deploy_files_run_the_same_image_and_command() -> None:
    yaml = pytest.importorskip("yaml")
    repo = ENTRYPOINT.parent
    job = yaml.safe_load((repo / "deploy/pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    for role in ("Master", "Worker"):
        (container,) = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["args"][:2] == ["rig", "train"]
        assert "SYS_NICE" in container["securityContext"]["capabilities"]["add"]
    sbatch = repo / "deploy/slurm.sbatch"
    assert subprocess.run(["bash", "-n", str(sbatch)], check=False).returncode == 0
    assert "rig train" in sbatch.read_text()
