"""What `rig train` and `rig launch` run: discover the GPUs, decide the plan, exec torchrun.

Everything a launch decides (which GPUs, the binding, the rendezvous, the run directory, the
arguments every rank gets) is computed before anything runs, so bad input stops here with one
line and `--dry-run` prints the exact commands. Execution is a single exec of torchrun (or of the
trainer for `device=cpu`), so torchrun's exit code is the command's exit code.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rig
from rig import log, paths, rankenv, safepython
from rig.errors import RigError
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.topology import Topology, read_topology
from rig.launch import autoresume, binding, ddp, gpuenv, levers, nodes
from rig.observe.metrics import config as metrics_config
from rig.spelling import AS_PARSED, Spelling
from rig.yolo import prepare, tuning

_logger = log.get("launch")

DEMO_DATA = paths.DEMO_DATASET / "data.yaml"
TORCHRUN = "rig.launch.torchrun"  # torchrun with rig's stop deadline and a bound store
LOOPBACK = "127.0.0.1"  # where a single node's store, gloo and NCCL listen
BINDER = "rig.launch.binder"  # what torchrun starts for each rank
TRAINER = "rig.launch.trainer"  # what each rank (or the one CPU process) runs
CPU_RANKS_ENV = "RIG_CPU_RANKS"  # --cpu-ranks from the environment, for schedulers
_TASK_SUFFIXES = {"-seg": "segment", "-pose": "pose", "-obb": "obb", "-cls": "classify"}


# ---------------------------------------------------------------------------------------------
# Decide: pure functions of the request and the topology.


def parse_kv(items: Sequence[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or key.startswith("-"):
            raise RigError(f"expected an Ultralytics argument key=value, got {item!r} (e.g. epochs=10)")
        if key in args:
            raise RigError(f"argument {key} is given twice; give it once")
        args[key] = value
    return args


def check_batch(user_args: Mapping[str, str], world: int, typed: Spelling = AS_PARSED) -> None:
    raw = user_args.get("batch")
    if raw is None or world <= 1:
        return
    given = typed("batch", raw)
    try:
        batch = float(raw)
    except ValueError:
        raise RigError(f"{given} is not a number; give the total batch over all ranks, e.g. 16") from None
    if batch < 1 or batch != int(batch):
        raise RigError(
            f"{given} (AutoBatch) works on one GPU only; give a total batch divisible by "
            f"the {world} ranks, e.g. {world * 8}"
        )
    if int(batch) % world:
        lo = max(world, int(batch) // world * world)
        raise RigError(
            f"{given} is not divisible by the {world} ranks; "
            f"use a multiple of {world}, e.g. {lo} or {lo + world}"
        )


def default_batch(user_args: Mapping[str, str], world: int, per_gpu: float) -> tuple[int, str] | None:
    """The total batch when none is given under DDP: Ultralytics' default per GPU times the world.

    Ultralytics would split its default (16) over the global world size: 3 GPUs silently train with
    15, 24 ranks with a batch of 0 (a crash). None: one rank, a batch given, or a resume (the
    checkpoint has its batch).
    """
    if world <= 1 or "batch" in user_args or resume_of(user_args) is not False:
        return None
    if per_gpu < 1 or per_gpu != int(per_gpu):
        raise RigError(
            f"Ultralytics' default batch is {per_gpu:g} (AutoBatch), which works on one GPU only; "
            f"give a total batch for the {world} ranks, e.g. batch={world * 16}"
        )
    total = int(per_gpu) * world
    return total, (
        f"Ultralytics' default {int(per_gpu)} per GPU x {world} GPUs (it would split {int(per_gpu)} over "
        f"them); give batch= for another total"
    )


def _ultralytics_default(key: str, fallback: float) -> float:
    try:
        cfg: Any = importlib.import_module("ultralytics.utils").DEFAULT_CFG_DICT
    except ImportError:
        return fallback
    return float(cfg.get(key, fallback))


def guess_task(user_args: Mapping[str, str]) -> str:
    if user_args.get("task"):
        return user_args["task"]
    stem = Path(user_args.get("model", "yolo11n.pt")).stem
    return next((task for suffix, task in _TASK_SUFFIXES.items() if stem.endswith(suffix)), "detect")


def next_run_dir(project: Path, name: str, exist_ok: bool) -> Path:
    """Ultralytics' naming (train, train-2, train-3...: its increment_path with sep "-"), decided
    once so every rank shares it."""
    path = project / name
    if exist_ok or not path.exists():
        return path
    n = 2
    while (project / f"{name}-{n}").exists():
        n += 1
    return project / f"{name}-{n}"


def reserve_run_dir(project: Path, name: str, exist_ok: bool) -> Path:
    """next_run_dir, taken with an atomic mkdir: of two launches started at once, one gets train and
    the other train-2, never both the same folder (the ranks then write into it with exist_ok)."""
    path, n = project / name, 2
    try:
        project.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                path.mkdir(exist_ok=exist_ok)
                return path
            except FileExistsError:
                if not path.is_dir():
                    raise
                path, n = project / f"{name}-{n}", n + 1
    except OSError as e:
        raise RigError(
            f"cannot create the run directory {path} ({e.strerror or e}); give project= a writable folder"
        ) from None


def torchrun_command(
    plan: Sequence[binding.RankBinding],
    node: nodes.NodeSpec,
    program: Sequence[str],
    python: str,
    gpus_per_rank: str = "ordered",
) -> list[str]:
    # torchrun itself, with the stop deadline of the environment (RIG_STOP_GRACE) instead of 30 s.
    cmd = safepython.module(python, TORCHRUN)
    if node.nnodes == 1:
        # --standalone's store would listen on every interface: static, on the loopback, on a free
        # port (0: rig.launch.torchrun picks it and binds gloo and NCCL to the loopback too).
        cmd += ["--nnodes", "1", "--node-rank", "0", "--rdzv-backend", "static", "--rdzv-id", "single"]
        cmd += ["--master-addr", LOOPBACK, "--master-port", "0", "--rdzv-endpoint", f"{LOOPBACK}:0"]
    else:
        # Static rendezvous: node rank N holds global ranks N*nproc.., node 0 hosts the store at
        # MASTER_ADDR, and every rank connects there. c10d would order nodes by host name and pid
        # (ignoring --node-rank) and send ranks to node 0's own idea of its name, which in
        # containers is often the same on every node. The endpoint is explicit too: torchrun takes
        # PET_RDZV_ENDPOINT from the environment as its default, and it would win over --master-addr.
        addr = str(node.master_addr)
        host = f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr  # an IPv6 literal
        cmd += [
            "--nnodes", str(node.nnodes), "--node-rank", str(node.node_rank),
            "--rdzv-backend", "static", "--rdzv-id", node.rdzv_id,
            "--master-addr", host, "--master-port", str(node.master_port),
            "--rdzv-endpoint", f"{host}:{node.master_port}",
            "--rdzv-conf", f"timeout={ddp.rendezvous_timeout(os.environ)}",  # torch's static: 600 s fixed
        ]  # fmt: skip
    cmd += ["--nproc-per-node", str(len(plan)), "--max-restarts", "0"]
    # --no-python: torchrun would start `python -u -m BINDER`, with the current folder on sys.path.
    binder = ["--no-python", *safepython.module(python, BINDER)]
    binder += ["--plan", binding.to_json(plan), "--gpus-per-rank", gpus_per_rank]
    return [*cmd, *binder, "--", *program]


def run_gpus(plan: Sequence[binding.RankBinding], gpu_ids: Sequence[int]) -> list[tuple[int, str]]:
    """The run's GPUs for every rank (rig.rankenv): each by its number in the container (what
    --gpus and device= name) and its bus id, so telemetry samples those GPUs, labelled so."""
    return [(i, r.gpu_bus_id) for i, r in zip(gpu_ids, plan, strict=True) if r.gpu_bus_id]


@dataclass(frozen=True)
class Launch:
    """What would run: the command and the variables it adds to the environment."""

    command: list[str]
    env: dict[str, str]
    done: str | None = None  # nothing to run (resume=auto of a finished run): why

    def shell(self) -> str:
        return shlex.join(["env", *(f"{k}={v}" for k, v in sorted(self.env.items())), *self.command])


# ---------------------------------------------------------------------------------------------
# Discover: the topology, the rendezvous, Ultralytics' settings (lazily: the image has them).


def topology(sysfs_root: str | None = None, gpu_bus_ids: str | None = None) -> Topology:
    """This machine's topology, or another's: a copy of its /sys and its GPUs' bus ids, in order."""
    ids = [b for b in gpu_bus_ids.split(",") if b.strip()] if gpu_bus_ids else None
    root = Path(sysfs_root) if sysfs_root else Path("/")
    if sysfs_root and not root.is_dir():
        raise RigError(f"--sysfs-root {root} is not a directory; give a copy of a machine's /sys")
    return read_topology(root, ids)


def _settings_dir(key: str, fallback: Path) -> Path:
    try:
        settings: Any = importlib.import_module("ultralytics.utils").SETTINGS
    except ImportError:
        return fallback
    return Path(settings[key])


def make_plan(topology: Topology, gpu_ids: list[int]) -> list[binding.RankBinding]:
    plan = binding.make_plan(topology, len(gpu_ids), gpu_ids)
    for warning in plan.warnings:
        _logger.warning("%s", warning)
    return list(plan.ranks)


def _tuning(
    user_args: Mapping[str, str], rank_cpus: int, nranks: int, world: int | None = None
) -> dict[str, str]:
    added: dict[str, str] = {}
    for d in tuning.launch_decisions(
        user_args=user_args, data=user_args.get("data"), rank_cpus=rank_cpus, nranks=nranks, world=world
    ):
        if d.key not in user_args:
            _logger.info("%s=%s: %s", d.key, d.value, d.reason)
            added[d.key] = d.value
    return added


def _levers(user_args: dict[str, str], *, world: int, cpu: bool) -> tuple[dict[str, str], dict[str, str]]:
    """compile and sync_bn (rig.launch.levers): the arguments without rig's own, the trainer's variables;
    rect= off for training with more than one rank (rig.launch.ddp)."""
    typed = levers.ultralytics_value()
    decided = levers.decide(user_args, world=world, cpu=cpu, typed=typed)
    args, rect_warning = ddp.without_rect(decided.args, world, typed)
    for warning in (*decided.warnings, *([rect_warning] if rect_warning else [])):
        _logger.warning("%s", warning)
    return args, decided.env


def resume_of(args: Mapping[str, str]) -> bool | str:
    """resume= as Ultralytics reads it: False (absent, empty, False, None), True, or a checkpoint's path."""
    text = args.get("resume", "").strip()
    if text.lower() in {"", "false", "none"}:
        return False
    return True if text.lower() == "true" else text


def _defaults(user_args: dict[str, str]) -> dict[str, str]:
    """data and model when the user gave none: the demo dataset, yolo11n (from scratch if offline)."""
    args = dict(user_args)
    resuming = resume_of(args) is not False
    if "data" not in args and not resuming:
        if not DEMO_DATA.exists():
            raise RigError(
                f"no data= given and no demo dataset at {DEMO_DATA}; run `make demo-data` or pass data="
            )
        args["data"] = str(DEMO_DATA)
    if "model" not in args and not resuming:
        weights = _settings_dir("weights_dir", Path("weights")) / "yolo11n.pt"
        args["model"] = "yolo11n.pt" if weights.exists() else "yolo11n.yaml"
        if not weights.exists():
            _logger.info("no model= given and no %s: training yolo11n from scratch", weights)
    return args


def _resume(args: dict[str, str]) -> dict[str, str]:
    """resume=True continues the newest run unless model= names its last.pt."""
    if resume_of(args) is not True or args.get("model", "").endswith(".pt"):
        return args
    runs = _settings_dir("runs_dir", Path("runs").absolute())
    found = sorted(runs.glob("**/last*.pt"), key=os.path.getctime)
    if not found:
        raise RigError(f"resume=True but no last.pt under {runs}; give model=path/to/last.pt")
    _logger.info("resuming %s", found[-1])
    return {**args, "model": str(found[-1])}


def _project(args: Mapping[str, str]) -> Path:
    project = Path(args["project"]) if args.get("project") else None
    if project is None or not project.is_absolute():
        base = _settings_dir("runs_dir", Path("runs").absolute()) / guess_task(args)
        project = base / project if project else base
    return project


def default_name(environ: Mapping[str, str]) -> str:
    """train, or under a scheduler train-<job> (the same across the job's restarts: resume=auto)."""
    job = nodes.job_name(environ)
    return f"train-{job}" if job else "train"


def _auto_resume(
    args: dict[str, str], read: Callable[[Path], autoresume.RunState] = autoresume.read_state
) -> tuple[dict[str, str], str | None]:
    """resume=auto: resume=True from the run's last.pt, a fresh run in that directory, or (the
    second value) why there is nothing to train."""
    if args.get("resume", "").strip().lower() != "auto":
        return args, None
    rest = {k: v for k, v in args.items() if k != "resume"}
    run_dir = _project(rest) / (rest.get("name") or default_name(os.environ))
    decision = autoresume.decide(run_dir, read(run_dir))
    if decision.kind == "finished":
        return rest, decision.message
    _logger.info("%s", decision.message)
    if decision.kind == "resume":
        return {**rest, "resume": "True", "model": str(run_dir / "weights" / "last.pt")}, None
    return {**rest, "project": str(run_dir.parent), "name": run_dir.name, "exist_ok": "True"}, None


def _run_dir(args: dict[str, str], reserve: bool = True) -> tuple[dict[str, str], Path | None]:
    """The run's folder, decided once for every rank; reserved (created) unless this is a dry run."""
    if resume_of(args) is not False:
        return args, None  # the checkpoint knows its run directory
    project = _project(args)
    exist_ok = args.get("exist_ok", "").lower() == "true"
    name = args.get("name") or default_name(os.environ)
    run_dir = (reserve_run_dir if reserve else next_run_dir)(project, name, exist_ok)
    return {**args, "project": str(run_dir.parent), "name": run_dir.name, "exist_ok": "True"}, run_dir


def _check_dataset(args: Mapping[str, str]) -> None:
    """Dataset checks (and any download) once per node, before the ranks start."""
    data = args.get("data")
    if not data:
        return
    try:
        checks: Any = importlib.import_module("ultralytics.data.utils")
    except ImportError:
        return
    try:
        (checks.check_cls_dataset if guess_task(args) == "classify" else checks.check_det_dataset)(data)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RigError(f"dataset {data}: {first}") from None


# ---------------------------------------------------------------------------------------------
# Execute.


def execute(launch: Launch) -> int:
    """Log the decision, then exec it: torchrun's exit code is the command's."""
    env = {**os.environ, **launch.env}
    _logger.info("Executing: %s", shlex.join(launch.command))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(launch.command[0], launch.command, env)


def cpu_ranks(given: str | None, environ: Mapping[str, str], typed: Spelling = AS_PARSED) -> int | None:
    """--cpu-ranks N, or RIG_CPU_RANKS=N from the environment (for schedulers); None: neither."""
    name, raw = ("--cpu-ranks", given) if given is not None else (CPU_RANKS_ENV, environ.get(CPU_RANKS_ENV))
    if raw is None or (given is None and not raw.strip()):
        return None
    text = raw.strip()
    shown = typed(name, raw) if name == "--cpu-ranks" else f"{name}={raw!r}"
    if not text.isdigit() or int(text) < 1:
        raise RigError(f"{shown}: give the number of CPU ranks per node, a whole number >= 1 (e.g. 2)")
    return int(text)


@dataclass(frozen=True)
class Devices:
    """What each node trains on: GPUs (their CUDA ids) or `ranks` processes on its CPUs."""

    kind: str  # "gpu", "cpu" (gloo ranks) or "mps" (one process)
    gpus: str | list[int] | int = "all"
    ranks: int = 1


def choose_devices(
    user_args: Mapping[str, str], gpus: str | None, ranks: int | None, typed: Spelling = AS_PARSED
) -> Devices:
    device = user_args.get("device", "").strip().lower()
    if device in {"cpu", "mps"}:
        if gpus is not None:
            raise RigError(f"both {typed('--gpus', gpus)} and device={device} given; give one of them")
        if device == "mps" and (ranks or 1) > 1:
            raise RigError("device=mps trains in one process; drop --cpu-ranks (or use device=cpu)")
        return Devices(device, ranks=ranks or 1)
    if ranks is not None:
        raise RigError(
            f"--cpu-ranks {ranks} trains on the CPU but the run is on GPUs: add device=cpu, "
            f"or drop --cpu-ranks (and unset {CPU_RANKS_ENV}) to train on GPUs"
        )
    if device and gpus is not None:
        raise RigError(f"both {typed('--gpus', gpus)} and device={device} given; give one of them")
    return Devices("gpu", parse_gpus(device, typed, "device") if device else parse_gpus(gpus, typed))


def world_line(devices: Devices, node: nodes.NodeSpec, per_node: int) -> str:
    world = per_node * node.nnodes
    how = {"gpu": "gpu, nccl", "cpu": "cpu, gloo", "mps": "mps"}[devices.kind]
    if world == 1 and devices.kind != "gpu":
        how = f"{devices.kind}, one process"
    ranks = "rank" if world == 1 else "ranks"
    nodes_ = "node" if node.nnodes == 1 else "nodes"
    per = "rank" if per_node == 1 else "ranks"
    return f"world: {world} {ranks} = {node.nnodes} {nodes_} x {per_node} {per} per node ({how})"


def plan_train(
    kv_args: Sequence[str],
    *,
    gpus: str | None = None,
    ranks: int | None = None,
    discover: Callable[[], Topology] = topology,
    check_dataset: bool = True,
    typed: Spelling = AS_PARSED,
) -> Launch:
    """What `rig train` runs: torchrun over the binder and the trainer, on each node's GPUs or CPU
    ranks; a single CPU (or MPS) rank on one node is the trainer alone, with the same arguments."""
    user = parse_kv(kv_args)
    devices = choose_devices(user, gpus, ranks, typed)
    cpu = devices.kind != "gpu"
    node = nodes.node_spec(os.environ)
    metrics_config.endpoint(os.environ)  # a bad RIG_METRICS_PORT: one line, before anything runs
    if devices.kind == "mps" and node.nnodes > 1:
        raise RigError("device=mps trains in one process; unset NNODES (or the scheduler's node count)")
    # Bad values: one line, before anything runs.
    ddp.nccl_timeout(os.environ), ddp.stop_grace(os.environ), ddp.rendezvous_timeout(os.environ)
    topo = discover()
    if cpu:
        gpu_ids: list[int] = []
        plan = list(binding.cpu_plan(topo, devices.ranks).ranks)
    else:
        gpu_ids = select_gpus(devices.gpus, topo, typed)
        plan = make_plan(topo, gpu_ids)
    world = len(plan) * node.nnodes
    check_batch(user, world, typed)
    _logger.info("%s", world_line(devices, node, len(plan)))
    user, done = _auto_resume(user)
    if done:
        return Launch([], {}, done)
    user, lever_env = _levers(user, world=world, cpu=cpu)
    user = _resume(_defaults(user))
    user["device"] = devices.kind if cpu else ",".join(str(i) for i in gpu_ids)
    batch = default_batch(user, world, _ultralytics_default("batch", 16))
    if batch is not None:
        user["batch"] = str(batch[0])
        _logger.info("batch=%d: %s", *batch)
    user.update(_tuning(user, len(plan[0].cpus), len(plan), world))
    user, run_dir = _run_dir(user, reserve=check_dataset)
    if check_dataset:
        _check_dataset(user)
        if prepare.wanted(user, guess_task(user), world):  # before any rank waits on another
            user = prepare.before_ranks(user, nranks=len(plan), world=world)
    python = sys.executable
    program = [*safepython.module(python, TRAINER), *(f"{k}={v}" for k, v in user.items())]
    folder = str(run_dir) if run_dir else None
    ranks_env = rankenv.launch_variables(None if cpu else run_gpus(plan, gpu_ids), folder)
    env = {**_env_delta(len(plan[0].cpus)), **lever_env, **ranks_env}
    env.update(metrics_config.node_env())
    if cpu and world == 1:
        return Launch(program, env)  # one rank: no process group to join, the container's CPUs unbound
    return Launch(torchrun_command(plan, node, program, python, gpus_per_rank="one"), env)


def plan_launch(
    program: Sequence[str], topo: Topology, gpus: str | None = None, typed: Spelling = AS_PARSED
) -> Launch:
    """What `rig launch` runs: the user's program on each rank, through torchrun and the binder."""
    ddp.stop_grace(os.environ)
    gpu_ids = select_gpus(parse_gpus(gpus, typed), topo, typed)
    plan = make_plan(topo, gpu_ids)
    return Launch(
        torchrun_command(plan, nodes.node_spec(os.environ), program, sys.executable),
        {**_env_delta(len(plan[0].cpus)), **rankenv.launch_variables(run_gpus(plan, gpu_ids), None)},
    )


def _env_delta(threads: int) -> dict[str, str]:
    """What the job's environment gains. Decided from the environment as rig found it: importing
    Ultralytics (for its settings) sets OMP_NUM_THREADS=1, which is not the user's choice."""
    full = gpuenv.updated(rig.USER_ENVIRON, threads=threads)
    return {k: v for k, v in full.items() if os.environ.get(k) != v}
