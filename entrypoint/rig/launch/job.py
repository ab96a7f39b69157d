"""What `rig train` and `rig launch` run: discover the GPUs, decide the plan, exec torchrun.

Everything a launch decides (which GPUs, the binding, the rendezvous, the run directory, the
arguments every rank gets) is computed before anything runs, so bad input stops here with one
line and `--dry-run` prints the exact commands. Execution is a single exec of torchrun (or of the
trainer for `device=cpu`), so torchrun's exit code is the command's exit code.

`plan_train` is a chain of steps: the device kind (GPUs, CPU ranks or MPS) and this node's ranks,
the world, then Ultralytics' arguments by rig.launch.trainargs' rules, the run directory, and the
command.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import rig
from rig import log, paths, rankenv, safepython
from rig.errors import RigError
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.topology import Topology, read_topology
from rig.launch import autoresume, binding, ddp, gpuenv, nodes, steplevers, trainargs
from rig.observe.metrics import config as metrics_config
from rig.yolo import datasets, gpubatch, tuning, ultra
from rig.yolo.nodecache import prepare

_logger = log.get("launch")

DEMO_DATA = paths.DEMO_DATASET / "data.yaml"
TORCHRUN = "rig.launch.torchrun"  # torchrun with rig's stop deadline and a bound store
LOOPBACK = "127.0.0.1"  # where a single node's store, gloo and NCCL listen
BINDER = "rig.launch.binder"  # what torchrun starts for each rank
TRAINER = "rig.launch.trainer"  # what each rank (or the one CPU process) runs
CPU_RANKS_ENV = "RIG_CPU_RANKS"  # --cpu-ranks from the environment, for schedulers


# ---------------------------------------------------------------------------------------------
# Decide: pure functions of the request and the topology.


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


def _runs_dir() -> Path:
    return ultra.settings_dirs()["runs_dir"]


def make_plan(topology: Topology, gpu_ids: list[int]) -> list[binding.RankBinding]:
    plan = binding.make_plan(topology, len(gpu_ids), gpu_ids)
    for warning in plan.warnings:
        _logger.warning("%s", warning)
    return list(plan.ranks)


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
    run_dir = trainargs.project(rest, runs_dir=_runs_dir()) / (rest.get("name") or default_name(os.environ))
    decision = autoresume.decide(run_dir, read(run_dir))
    if decision.kind == "finished":
        return rest, decision.message
    _logger.info("%s", decision.message)
    if decision.kind == "resume":
        return {**rest, "resume": "True", "model": str(run_dir / "weights" / "last.pt")}, None
    return {**rest, "project": str(run_dir.parent), "name": run_dir.name, "exist_ok": "True"}, None


def _run_dir(args: dict[str, str], reserve: bool = True) -> tuple[dict[str, str], Path | None]:
    """The run's folder, decided once for every rank; reserved (created) unless this is a dry run."""
    if trainargs.resume_of(args) is not False:
        return args, None  # the checkpoint knows its run directory
    project = trainargs.project(args, runs_dir=_runs_dir())
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
        ultra.check_dataset(data, trainargs.guess_task(args))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RigError(f"dataset {data}: {first}") from None


def _before_ranks(args: dict[str, str], nranks: int, world: int) -> dict[str, str]:
    """What runs once per node before any rank waits on another: the dataset check, the data's
    preparation (rig.yolo.prepare)."""
    _check_dataset(args)
    if prepare.wanted(args, trainargs.guess_task(args), world):
        return prepare.before_ranks(args, nranks=nranks, world=world)
    return args


# ---------------------------------------------------------------------------------------------
# Execute.


def execute(launch: Launch) -> int:
    """Log the decision, then exec it: torchrun's exit code is the command's."""
    env = {**os.environ, **launch.env}
    _logger.info("Executing: %s", shlex.join(launch.command))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(launch.command[0], launch.command, env)


# ---------------------------------------------------------------------------------------------
# What each node trains on: the device kind (GPUs, CPU ranks, MPS) and its ranks.


def cpu_ranks(given: str | None, environ: Mapping[str, str]) -> int | None:
    """--cpu-ranks N, or RIG_CPU_RANKS=N from the environment (for schedulers); None: neither."""
    raw = given if given is not None else environ.get(CPU_RANKS_ENV)
    if raw is None or (given is None and not raw.strip()):
        return None
    text = raw.strip()
    if not text.isdigit() or int(text) < 1:
        how = "give the number of CPU ranks per node, a whole number >= 1 (e.g. 2)"
        if given is None:
            raise RigError(f"{CPU_RANKS_ENV}={raw!r}: {how}")
        raise RigError(how, option="--cpu-ranks", value=raw)
    return int(text)


@dataclass(frozen=True)
class Devices:
    """What each node trains on: GPUs (their CUDA ids) or `ranks` processes on its CPUs."""

    kind: str  # "gpu", "cpu" (gloo ranks) or "mps" (one process)
    gpus: str | list[int] | int = "all"
    ranks: int = 1


def choose_devices(user_args: Mapping[str, str], gpus: str | None, ranks: int | None) -> Devices:
    device = user_args.get("device", "").strip().lower()
    if device in {"cpu", "mps"}:
        if gpus is not None:
            raise RigError(f"device={device} is given too; give one of them", option="--gpus", value=gpus)
        if device == "mps" and (ranks or 1) > 1:
            raise RigError(
                "trains in one process; drop --cpu-ranks (or use device=cpu)", option="device", value=device
            )
        return Devices(device, ranks=ranks or 1)
    if ranks is not None:
        raise RigError(
            f"trains on the CPU but the run is on GPUs: add device=cpu, "
            f"or drop --cpu-ranks (and unset {CPU_RANKS_ENV}) to train on GPUs",
            option="--cpu-ranks",
            value=ranks,
        )
    if device and gpus is not None:
        raise RigError(f"device={device} is given too; give one of them", option="--gpus", value=gpus)
    return Devices("gpu", parse_gpus(device, "device") if device else parse_gpus(gpus))


@dataclass(frozen=True)
class Ranks:
    """This node's ranks (each one's CPUs, memory node and GPU) and the GPUs' CUDA ids (none on the CPU)."""

    bindings: list[binding.RankBinding]
    gpu_ids: list[int]


def place_ranks(devices: Devices, topo: Topology) -> Ranks:
    """The ranks of one node: one per chosen GPU, or `devices.ranks` on shares of its CPUs."""
    if devices.kind != "gpu":
        return Ranks(list(binding.cpu_plan(topo, devices.ranks).ranks), [])
    gpu_ids = select_gpus(devices.gpus, topo)
    return Ranks(make_plan(topo, gpu_ids), gpu_ids)


def device_arg(devices: Devices, ranks: Ranks) -> str:
    """device= as the trainer gets it: cpu or mps, or the CUDA ids of the run's GPUs."""
    return devices.kind if devices.kind != "gpu" else ",".join(str(i) for i in ranks.gpu_ids)


def node_of(devices: Devices, environ: Mapping[str, str]) -> nodes.NodeSpec:
    """This node's place in the job; every variable a launch reads checked here, before anything runs."""
    node = nodes.node_spec(environ)
    metrics_config.endpoint(environ)  # a bad RIG_METRICS_PORT: one line, before anything runs
    if devices.kind == "mps" and node.nnodes > 1:
        raise RigError(
            "trains in one process; unset NNODES (or the scheduler's node count)",
            option="device",
            value="mps",
        )
    ddp.nccl_timeout(environ), ddp.stop_grace(environ), ddp.rendezvous_timeout(environ)
    return node


def world_line(devices: Devices, node: nodes.NodeSpec, per_node: int) -> str:
    world = per_node * node.nnodes
    how = {"gpu": "gpu, nccl", "cpu": "cpu, gloo", "mps": "mps"}[devices.kind]
    if world == 1 and devices.kind != "gpu":
        how = f"{devices.kind}, one process"
    ranks = "rank" if world == 1 else "ranks"
    nodes_ = "node" if node.nnodes == 1 else "nodes"
    per = "rank" if per_node == 1 else "ranks"
    return f"world: {world} {ranks} = {node.nnodes} {nodes_} x {per_node} {per} per node ({how})"


# ---------------------------------------------------------------------------------------------
# The plans: each a chain of the steps above.


def plan_train(
    kv_args: Sequence[str],
    *,
    gpus: str | None = None,
    ranks: int | None = None,
    discover: Callable[[], Topology] = topology,
    check_dataset: bool = True,
) -> Launch:
    """What `rig train` runs: torchrun over the binder and the trainer, on each node's GPUs or CPU
    ranks; a single CPU (or MPS) rank on one node is the trainer alone, with the same arguments."""
    user = trainargs.parse_kv(kv_args)
    devices = choose_devices(user, gpus, ranks)
    node = node_of(devices, os.environ)
    placed = place_ranks(devices, discover())
    world = len(placed.bindings) * node.nnodes
    trainargs.check_batch(user, world)
    _logger.info("%s", world_line(devices, node, len(placed.bindings)))
    user, done = _auto_resume(user)
    if done:
        return Launch([], {}, done)
    args, lever_env = _train_args(user, devices, placed, world)
    args, run_dir = _run_dir(args, reserve=check_dataset)
    if check_dataset:
        args = _before_ranks(args, len(placed.bindings), world)
    env = {**lever_env, **rankenv.launch_variables(None, str(run_dir) if run_dir else None)}
    return _train_launch(args, env, devices, placed, node)


def _train_args(
    user: dict[str, str], devices: Devices, placed: Ranks, world: int
) -> tuple[dict[str, str], dict[str, str]]:
    """The trainer's arguments (rig.launch.trainargs' rules, with what Ultralytics knows) and the
    variables the levers give the trainer."""
    cpu = devices.kind != "gpu"
    args, lever_env = trainargs.with_levers(user, world=world, cpu=cpu, smart_value=ultra.smart_value)
    args = trainargs.with_defaults(
        args, demo_data=DEMO_DATA, weights_dir=ultra.settings_dirs()["weights_dir"]
    )
    args = trainargs.with_resume(args, runs_dir=_runs_dir())
    args = {**args, "device": device_arg(devices, placed)}
    gpus = _gpu_memory(devices, placed)
    args = trainargs.with_batch(args, world, *_per_gpu_batch(args, gpus, world))
    nranks, rank_cpus = len(placed.bindings), len(placed.bindings[0].cpus)
    decisions = tuning.launch_decisions(
        user_args=args, data=args.get("data"), rank_cpus=rank_cpus, nranks=nranks, world=world
    )
    args, step_env = _step_levers(args, gpus[0], cpu=cpu, world=world)
    return trainargs.with_tuning(args, decisions), {**lever_env, **step_env}


def _gpu_memory(devices: Devices, placed: Ranks) -> tuple[list[gpubatch.GpuMemory], str]:
    """The run's GPUs as NVML sees them (name, memory), read once for the batch and the levers."""
    if devices.kind != "gpu":
        return [], f"device={devices.kind}"
    return gpubatch.read_gpus([r.gpu_bus_id for r in placed.bindings if r.gpu_bus_id])


def _per_gpu_batch(
    args: Mapping[str, str], gpus: tuple[list[gpubatch.GpuMemory], str], world: int
) -> tuple[float, str | None]:
    """Without batch=, on GPUs: the per-GPU batch from their memory (rig.yolo.gpubatch); else
    Ultralytics' default, which trainargs.with_batch spreads over the world."""
    default = float(ultra.default("batch"))
    if gpus[1].startswith("device=") or "batch" in args or trainargs.resume_of(args) is not False:
        return default, None
    nbs = int(ultra.smart_value(args["nbs"])) if args.get("nbs") else int(ultra.default("nbs"))
    choice = gpubatch.for_launch(args, *gpus, world, datasets_dir=ultra.datasets_dir(), nbs=nbs)
    if not choice.measured:  # Ultralytics' default, as without this decision; the line says why
        _logger.info("batch from the GPUs' memory: %s", choice.reason)
        return default, None
    return float(choice.per_gpu), choice.reason


def _step_levers(
    args: dict[str, str], gpus: Sequence[gpubatch.GpuMemory], *, cpu: bool, world: int
) -> tuple[dict[str, str], dict[str, str]]:
    """channels_last, CUDA graphs and fused optimizer kernels (rig.launch.steplevers): as `rig bench`
    measured them on this GPU for this model, image size and batch; one INFO line each."""
    steplevers.check_fused_arg(args)
    key = None
    names = {g.name for g in gpus}
    batch = ultra.smart_value(args.get("batch", str(ultra.default("batch"))))
    # A whole batch the bench can measure at: not AutoBatch's -1 or a fraction, not a resumed run's.
    measurable = isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1
    if measurable and trainargs.resume_of(args) is False and (cpu or len(names) == 1):
        key = steplevers.key_for(
            device="cpu" if cpu else names.pop(),
            torch=steplevers.torch_version(),
            model=args.get("model", "yolo11n.pt"),
            imgsz=tuning.imgsz_of(args),
            batch=max(batch // max(world, 1), 1),
            amp=not cpu and gpubatch.amp_of(args),
        )
    record = steplevers.read_record(key, steplevers.record_dir()) if key else None
    run_steps = None
    if record and key and args.get("data"):  # the images are counted only where a record needs them
        epochs = ultra.smart_value(args["epochs"]) if args.get("epochs") else ultra.default("epochs")
        images = datasets.count_train_images(args["data"], ultra.datasets_dir())
        run_steps = steplevers.run_steps(epochs, images, key.batch, world)
    decided = steplevers.decide(
        args,
        record,
        key=key,
        cpu=cpu,
        world=world,
        run_steps=run_steps,
        follow=steplevers.following(os.environ),
    )
    for line in steplevers.describe(decided.choices):
        _logger.info("%s", line)
    return decided.args, decided.env


def _train_launch(
    args: Mapping[str, str], env: Mapping[str, str], devices: Devices, placed: Ranks, node: nodes.NodeSpec
) -> Launch:
    """The trainer with its arguments, under torchrun and the binder; a single CPU (or MPS) rank
    on one node alone: no process group to join, the container's CPUs unbound."""
    python = sys.executable
    program = [*safepython.module(python, TRAINER), *(f"{k}={v}" for k, v in args.items())]
    full = {**_env_delta(len(placed.bindings[0].cpus)), **env}
    if devices.kind == "gpu":
        full.update(rankenv.launch_variables(run_gpus(placed.bindings, placed.gpu_ids), None))
    full.update(metrics_config.node_env())
    if devices.kind != "gpu" and len(placed.bindings) * node.nnodes == 1:
        return Launch(program, full)
    return Launch(torchrun_command(placed.bindings, node, program, python, gpus_per_rank="one"), full)


def plan_launch(program: Sequence[str], topo: Topology, gpus: str | None = None) -> Launch:
    """What `rig launch` runs: the user's program on each rank, through torchrun and the binder."""
    ddp.stop_grace(os.environ)
    gpu_ids = select_gpus(parse_gpus(gpus), topo)
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
