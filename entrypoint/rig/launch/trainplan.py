"""What `rig train` runs, as one pipeline: parse once, discover once, decide once, assemble once.

    request = parse(kv_args, gpus=..., cpu_ranks=..., environ=...)  # the user's input, checked
    facts = discover(request, environ, read_topology)               # everything read from the world
    plan = decide(request, facts)                                   # pure: what to run, and why
    plan = reserve_run_dir(plan)                                    # writes   } the two steps a
    plan = prepare_data(plan)                                       # writes   } dry run skips
    launch = assemble(plan)                                         # the command and its variables

Planning has no side effect: `decide` only logs what it decided. The two steps that change the world
are named, so `--dry-run` prints the command of the same plan without them: the run directory it
would claim (rig.launch.rundir) and no data prepared (rig.yolo.nodecache.prepare). A decision that
needs a new fact about the machine gets it as a field of `Facts`, read in `discover`, and is made in
`decide` (or the rules it calls: rig.launch.trainargs).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import rig
from rig import log, paths, rankenv, safepython
from rig.errors import RigError
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.topology import Topology
from rig.launch import autoresume, binding, ddp, job, nodes, rundir, trainargs
from rig.yolo import tuning, ultra
from rig.yolo.nodecache import prepare

_logger = log.get("launch")

DEMO_DATA = paths.DEMO_DATASET / "data.yaml"
TRAINER = "rig.launch.trainer"  # what each rank (or the one CPU process) runs
CPU_RANKS_ENV = "RIG_CPU_RANKS"  # --cpu-ranks from the environment, for schedulers
# What a scheduler or enroot's PyTorch hook may have set for a job's tasks: torchrun sets its own
# for every rank; a trainer that runs alone must see none, or Ultralytics takes it for a DDP rank.
RENDEZVOUS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


# ---------------------------------------------------------------------------------------------
# Parse: the request, checked, before anything is read.


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
class Request:
    args: dict[str, str]  # the user's Ultralytics arguments, key=value
    devices: Devices


def parse(
    kv_args: Sequence[str], *, gpus: str | None, cpu_ranks_given: str | None, environ: Mapping[str, str]
) -> Request:
    args = trainargs.parse_kv(kv_args)
    return Request(args, choose_devices(args, gpus, cpu_ranks(cpu_ranks_given, environ)))


# ---------------------------------------------------------------------------------------------
# Discover: everything the decision reads, read here once.


@dataclass(frozen=True)
class RunDirs:
    """Where the run goes as the request names it, and what is there."""

    project: Path
    name: str
    existing: list[rundir.Existing]  # name, name-2... as they are, with their owners
    state: autoresume.RunState | None  # resume=auto: the last.pt of the folder it would continue


@dataclass(frozen=True)
class Facts:
    node: nodes.NodeSpec
    master_addresses: list[str]  # what the master address resolves to on this node
    topology: Topology
    identity: str | None  # the job's, which owns its run directory (rig.launch.nodes.job_identity)
    found: trainargs.Found
    runs_dir: Path
    runs: RunDirs
    machine: tuning.Machine  # RAM, /dev/shm, the dataset's size (rig.yolo.tuning)
    environ: dict[str, str]  # the environment of this launch
    user_environ: dict[str, str]  # the environment as rig found it (rig.USER_ENVIRON)


def _is_auto(args: Mapping[str, str]) -> bool:
    return args.get("resume", "").strip().lower() == "auto"


def discover_runs(
    args: Mapping[str, str], runs_dir: Path, environ: Mapping[str, str], identity: str | None
) -> RunDirs:
    """The run's folders; for resume=auto, the state of the one it would continue: the job's own
    (a scheduler's job), or project/name (outside one)."""
    project = trainargs.project(args, runs_dir=runs_dir)
    name = args.get("name") or rundir.default_name(nodes.job_name(environ))
    existing = rundir.scan(project, name)
    state = None
    if _is_auto(args):
        if identity is None:
            state = autoresume.read_state(project / name)
        else:
            choice = rundir.choose(project, name, existing, identity)
            state = autoresume.read_state(choice.path) if choice.owned else None
    return RunDirs(project, name, existing, state)


def discover(
    request: Request,
    environ: Mapping[str, str],
    read_topology: Callable[[], Topology],
    user_environ: Mapping[str, str] | None = None,
) -> Facts:
    node = nodes.node_spec(environ)
    dirs = ultra.settings_dirs(environ)
    runs_dir, weights = dirs["runs_dir"], dirs["weights_dir"] / "yolo11n.pt"
    demo = DEMO_DATA
    found = trainargs.Found(
        demo_data=demo,
        demo_data_exists=demo.exists(),
        default_weights=weights,
        default_weights_exist=weights.exists(),
        default_batch=float(ultra.default("batch")),
        newest_last=trainargs.newest_last(runs_dir) if trainargs.wants_newest_last(request.args) else None,
    )
    identity = nodes.job_identity(environ)
    return Facts(
        node=node,
        master_addresses=nodes.resolve(node.master_addr) if node.nnodes > 1 and node.master_addr else [],
        topology=read_topology(),
        identity=identity,
        found=found,
        runs_dir=runs_dir,
        runs=discover_runs(request.args, runs_dir, environ, identity),
        machine=tuning.discover(trainargs.default_data(request.args, found)),
        environ=dict(environ),
        user_environ=dict(user_environ if user_environ is not None else environ),
    )


# ---------------------------------------------------------------------------------------------
# Decide: pure functions of the request and the facts (they log what they decide).


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
    return Ranks(job.make_plan(topo, gpu_ids), gpu_ids)


def device_arg(devices: Devices, ranks: Ranks) -> str:
    """device= as the trainer gets it: cpu or mps, or the CUDA ids of the run's GPUs."""
    return devices.kind if devices.kind != "gpu" else ",".join(str(i) for i in ranks.gpu_ids)


def check_node(devices: Devices, facts: Facts) -> None:
    """Every variable a launch reads checked, before anything runs or waits."""
    node = facts.node
    job.metrics_env(facts.environ)  # a bad RIG_METRICS_PORT: one line, before anything runs
    if devices.kind == "mps" and node.nnodes > 1:
        raise RigError(
            "trains in one process; unset NNODES (or the scheduler's node count)",
            option="device",
            value="mps",
        )
    ddp.nccl_timeout(facts.environ), ddp.stop_grace(facts.environ), ddp.rendezvous_timeout(facts.environ)
    nodes.check_master(node, facts.master_addresses)


def world_line(devices: Devices, node: nodes.NodeSpec, per_node: int) -> str:
    world = per_node * node.nnodes
    how = {"gpu": "gpu, nccl", "cpu": "cpu, gloo", "mps": "mps"}[devices.kind]
    if world == 1 and devices.kind != "gpu":
        how = f"{devices.kind}, one process"
    ranks = "rank" if world == 1 else "ranks"
    nodes_ = "node" if node.nnodes == 1 else "nodes"
    per = "rank" if per_node == 1 else "ranks"
    return f"world: {world} {ranks} = {node.nnodes} {nodes_} x {per_node} {per} per node ({how})"


@dataclass(frozen=True)
class RunDir:
    """The run's folder: decided (a dry run prints it), then claimed by reserve_run_dir."""

    path: Path
    claim: bool  # a new folder, or the job's own: rundir.claim takes it; False: used as it is
    identity: str | None
    name: str  # the name the sequence name, name-2... starts from


@dataclass(frozen=True)
class Plan:
    devices: Devices
    node: nodes.NodeSpec
    ranks: Ranks
    args: dict[str, str]  # the trainer's arguments, but the run directory's
    env: dict[str, str]  # what the launch's environment gains
    unset: tuple[str, ...]  # what it loses
    run: RunDir | None  # None: a resumed checkpoint knows its run directory
    prepare: bool  # the launcher prepares the data before the ranks start
    done: str | None = None  # nothing to run (resume=auto of a finished run): why


def _auto_resume(args: dict[str, str], facts: Facts) -> tuple[dict[str, str], RunDir | None, str | None]:
    """resume=auto: the run's last.pt continued (resume=True), a fresh run in its folder, or (the
    third value) why there is nothing to train."""
    rest = {k: v for k, v in args.items() if k != "resume"}
    runs = facts.runs
    if facts.identity is None:  # outside a scheduler: the folder the name says
        folder, claim = runs.project / runs.name, False
    else:  # the job's own, or a new one
        choice = rundir.choose(runs.project, runs.name, runs.existing, facts.identity)
        folder, claim = choice.path, True
    state = runs.state or autoresume.RunState(folder / "weights" / "last.pt", exists=False)
    decision = autoresume.decide(folder, state)
    if decision.kind == "finished":
        return rest, None, decision.message
    _logger.info("%s", decision.message)
    if decision.kind == "resume":
        return {**rest, "resume": "True", "model": str(folder / "weights" / "last.pt")}, None, None
    return rest, RunDir(folder, claim, facts.identity, runs.name), None


def _run_dir(args: Mapping[str, str], facts: Facts) -> RunDir:
    """A new run's folder: project/name when the user said exist_ok=True, else the job's own or the
    first free name (claimed later: the nodes of a job agree on it by its identity)."""
    runs = facts.runs
    if args.get("exist_ok", "").strip().lower() == "true":
        return RunDir(runs.project / runs.name, False, facts.identity, runs.name)
    if facts.identity is None and facts.node.nnodes > 1:
        raise RigError(
            f"{facts.node.nnodes} nodes started by hand cannot agree on a new run directory: set RDZV_ID "
            "to one value for this run on every node (a restart with the same RDZV_ID and resume=auto "
            "continues it), or give name= with exist_ok=True"
        )
    choice = rundir.choose(runs.project, runs.name, runs.existing, facts.identity)
    return RunDir(choice.path, True, facts.identity, runs.name)


def decide(request: Request, facts: Facts) -> Plan:
    """The plan of one node: its ranks, the trainer's arguments and environment, the run's folder."""
    devices, node = request.devices, facts.node
    check_node(devices, facts)
    placed = place_ranks(devices, facts.topology)
    nranks = len(placed.bindings)
    world = nranks * node.nnodes
    trainargs.check_batch(request.args, world)
    _logger.info("%s", world_line(devices, node, nranks))
    user, run, done = dict(request.args), None, None
    if _is_auto(user):
        user, run, done = _auto_resume(user, facts)
    alone = devices.kind != "gpu" and world == 1
    if done:
        return Plan(devices, node, placed, user, {}, (), None, False, done)
    rank_cpus = len(placed.bindings[0].cpus)
    decided = trainargs.decide(
        user,
        world=world,
        cpu=devices.kind != "gpu",
        device=device_arg(devices, placed),
        found=facts.found,
        runs_dir=facts.runs_dir,
        smart_value=ultra.smart_value,
        tune=lambda args: tuning.decide_for(
            facts.machine, user_args=args, rank_cpus=rank_cpus, nranks=nranks, world=world
        ),
    )
    if not decided.resuming and run is None:
        run = _run_dir(decided.args, facts)
    env = {**job.env_delta(facts.user_environ, facts.environ, rank_cpus), **decided.env}
    if devices.kind == "gpu":
        env.update(rankenv.launch_variables(job.run_gpus(placed.bindings, placed.gpu_ids), None))
    env.update(job.metrics_env(facts.environ))
    unset = tuple(v for v in RENDEZVOUS_VARIABLES if v in facts.environ) if alone else ()
    wanted = prepare.wanted(decided.args, trainargs.guess_task(decided.args), world)
    return Plan(devices, node, placed, decided.args, env, unset, run, wanted)


# ---------------------------------------------------------------------------------------------
# The two steps that write, each skipped by a dry run.


def reserve_run_dir(plan: Plan) -> Plan:
    """Claim the run's folder (rig.launch.rundir): the one the plan names, or, when another launch
    took that name meanwhile, the next; the nodes of one job all end in the same."""
    run = plan.run
    if run is None or not run.claim:
        return plan
    path = rundir.claim(run.path.parent, run.name, run.identity)
    return dataclasses.replace(plan, run=dataclasses.replace(run, path=path, claim=False))


def prepare_data(plan: Plan) -> Plan:
    """What runs once per node before any rank waits on another: the dataset check (and any download),
    the label scan and the node image cache (rig.yolo.nodecache.prepare)."""
    data = plan.args.get("data")
    if data:
        try:
            ultra.check_dataset(data, trainargs.guess_task(plan.args))
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise RigError(f"dataset {data}: {first}") from None
    if not plan.prepare:
        return plan
    nranks = len(plan.ranks.bindings)
    args = prepare.before_ranks(plan.args, nranks=nranks, world=nranks * plan.node.nnodes)
    return dataclasses.replace(plan, args=args)


# ---------------------------------------------------------------------------------------------
# Assemble: the command, once.


def assemble(plan: Plan) -> job.Launch:
    """The trainer with its arguments, under torchrun and the binder; a single CPU (or MPS) rank on
    one node alone: no process group to join, the container's CPUs unbound."""
    if plan.done:
        return job.Launch([], {}, plan.done)
    args, env = dict(plan.args), dict(plan.env)
    if plan.run is not None:
        args.update(project=str(plan.run.path.parent), name=plan.run.path.name, exist_ok="True")
        env.update(rankenv.launch_variables(None, str(plan.run.path)))
    python = sys.executable
    program = [*safepython.module(python, TRAINER), *(f"{k}={v}" for k, v in args.items())]
    if plan.devices.kind != "gpu" and len(plan.ranks.bindings) * plan.node.nnodes == 1:
        return job.Launch(program, env, unset=plan.unset)
    return job.Launch(job.torchrun_command(plan.ranks.bindings, plan.node, program, python, "one"), env)


def plan_train(
    kv_args: Sequence[str],
    *,
    gpus: str | None = None,
    cpu_ranks_given: str | None = None,
    read_topology: Callable[[], Topology] = job.topology,
    dry_run: bool = False,
    environ: Mapping[str, str] | None = None,
) -> job.Launch:
    """The whole pipeline: what `rig train` runs (a dry run: the same, without the two writing steps)."""
    env = os.environ if environ is None else environ
    request = parse(kv_args, gpus=gpus, cpu_ranks_given=cpu_ranks_given, environ=env)
    plan = decide(request, discover(request, env, read_topology, rig.USER_ENVIRON))
    if not dry_run and not plan.done:
        plan = reserve_run_dir(prepare_data(plan))
    return assemble(plan)
