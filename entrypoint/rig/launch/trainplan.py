"""What `rig train` runs, as one pipeline: parse, discover, decide and assemble, each once.

    request = parse(kv_args, gpus=..., cpu_ranks_given=..., environ=...)  # the user's input, checked
    node = discover(environ, read_topology, user_environ)  # the node and its job, whatever is asked
    run = discover_run(request.args, node)                 # what is there for the run it names
    plan = decide(request, node, run)                      # pure: what to run, and why
    plan = prepare_data(plan)                              # writes   } the three steps
    plan = reserve_run_dir(plan)                           # writes   } a dry run
    plan = copy_checkpoint(plan)                           # writes   } skips
    launch = assemble(plan)                                # the command and its variables

Planning has no side effect: `decide` only logs what it decided. The steps that change the world
are named, so `--dry-run` prints the command of the same plan without them: the run directory it
would claim (rig.launch.runpolicy, which folder and why; rig.launch.rundir, the claim), no data
prepared (rig.yolo.nodecache.prepare), and a resumed checkpoint by its path, checked as a launch
checks it but not copied (rig.launch.resumecopy: the ranks load a copy of what was checked, never
the path). A decision that needs a new fact about the machine (a GPU's memory, say) gets it as a
field of `Node`, read in `discover`, and is made in `decide` or the rules it hands it to as a value
(rig.launch.trainargs.decide; the batch in rig.launch.batch).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import rig
from rig import envnumbers, log, paths, rankenv, safefs, safepython
from rig.errors import RigError
from rig.hardware import fabric
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.fabric import Fabric
from rig.hardware.topology import Topology
from rig.launch import (
    batch,
    binding,
    ddp,
    job,
    nodes,
    resumecopy,
    rundir,
    runpolicy,
    steplevers,
    trainargs,
)
from rig.yolo import contract, datasets, gpubatch, tuning, ultra, ultracheck
from rig.yolo.nodecache import buildlock, imagecache, prepare

_logger = log.get("launch")

DEMO_DATA = paths.DEMO_DATASET / "data.yaml"
TRAINER = "rig.launch.trainer"  # what each rank (or the one CPU process) runs
CPU_RANKS_ENV = "RIG_CPU_RANKS"  # --cpu-ranks from the environment, for schedulers
# What a scheduler or enroot's PyTorch hook may have set for a job's tasks: torchrun sets its own
# for every rank; a trainer that runs alone must see none, or Ultralytics takes it for a DDP rank.
RENDEZVOUS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


# ---------------------------------------------------------------------------------------------
# Parse: the request, checked, before anything is read.


CPU_RANKS = envnumbers.Number(
    CPU_RANKS_ENV,
    low=1,
    whole=True,
    hint="the number of CPU ranks per node (e.g. 2); unset it to train on GPUs",
)


def cpu_ranks(given: str | None, environ: Mapping[str, str]) -> int | None:
    """--cpu-ranks N, or RIG_CPU_RANKS=N from the environment (for schedulers); None: neither."""
    if given is None:
        return CPU_RANKS.read_int(environ) if environ.get(CPU_RANKS_ENV, "").strip() else None
    if (value := CPU_RANKS.parse(given)) is None:
        how = f"give the number of CPU ranks per node, {CPU_RANKS.accepted()} (e.g. 2)"
        raise RigError(how, option="--cpu-ranks", value=given)
    return int(value)


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
# Discover: everything the decision reads, read here once: the node (whatever is asked), then what
# the request names (its run's folders, its dataset).


@dataclass(frozen=True)
class Node:
    """The node and its job, as this launch finds them."""

    spec: nodes.NodeSpec
    master_addresses: list[str]  # what the master address resolves to on this node
    ephemeral_ports: tuple[int, int] | None  # the kernel's range for outgoing connections
    topology: Topology
    identity: str | None  # the job's, which owns its run directory (rig.launch.nodes.job_identity)
    default_name: str  # train, or the job's train-<job>
    runs_dir: Path
    found: trainargs.Found  # the demo dataset, yolo11n.pt, Ultralytics' default batch
    resources: tuning.Resources  # RAM, /dev/shm, room for the node image cache
    gpus: dict[str, gpubatch.GpuMemory]  # every GPU's name and memory, by bus id (NVML)
    gpus_state: str  # "ok", or why NVML told nothing
    torch: str  # torch's version, as rig bench's records spell it
    lever_records: tuple[steplevers.LeverRecord, ...]  # rig bench's measurements for this torch
    environ: dict[str, str]  # the environment of this launch
    user_environ: dict[str, str]  # the environment as rig found it (rig.USER_ENVIRON)
    fabric: Fabric | None = None  # several nodes: what the ranks talk over between them


def discover(
    environ: Mapping[str, str],
    read_topology: Callable[[], Topology],
    user_environ: Mapping[str, str],
    *,
    read_fabric: Callable[[], Fabric] | None = None,
    proc_root: Path = Path("/"),
) -> Node:
    """read_fabric: the fabric between nodes (several nodes only); None reads this machine's.
    proc_root: where /proc is read (the ephemeral port range), a fake tree in tests."""
    spec = nodes.node_spec(environ)
    dirs = ultra.settings_dirs(environ)
    gpus, gpus_state = gpubatch.read_all()
    torch = steplevers.torch_version()
    weights = dirs["weights_dir"] / "yolo11n.pt"
    found = trainargs.Found(
        demo_data=DEMO_DATA,
        demo_data_exists=DEMO_DATA.exists(),
        default_weights=weights,
        default_weights_exist=weights.exists(),
        default_batch=float(ultra.default("batch")),
        default_nbs=int(ultra.default("nbs")),
        default_epochs=int(ultra.default("epochs")),
    )
    return Node(
        spec=spec,
        master_addresses=nodes.resolve(spec.master_addr) if spec.nnodes > 1 and spec.master_addr else [],
        ephemeral_ports=nodes.ephemeral_ports(proc_root),
        topology=read_topology(),
        identity=nodes.job_identity(environ),
        default_name=rundir.default_name(nodes.job_name(environ)),
        runs_dir=dirs["runs_dir"],
        found=found,
        resources=tuning.read_resources(),
        gpus=gpus,
        gpus_state=gpus_state,
        torch=torch,
        lever_records=steplevers.read_records(steplevers.record_dir(environ), torch),
        environ=dict(environ),
        user_environ=dict(user_environ),
        fabric=None if spec.nnodes == 1 else (read_fabric or (lambda: fabric.read_fabric(environ=environ)))(),
    )


@dataclass(frozen=True)
class Run:
    """What is there for the run the request names: its folders and checkpoints, its dataset."""

    seen: runpolicy.Seen  # its folders, their owners, what a resume loads (rig.launch.runpolicy)
    dataset: tuning.Dataset  # the size of the dataset it trains on
    classes: int  # its class count (80 where the yaml cannot tell): the detection loss's memory


def discover_run(args: Mapping[str, str], node: Node) -> Run:
    """The run's folders, handed the node's facts (rig.launch.runpolicy.discover), and its dataset's size."""
    facts = runpolicy.Facts(node.runs_dir, node.default_name, node.identity, node.found, node.environ)
    seen = runpolicy.discover(args, facts)
    data = seen.located.data
    return Run(seen, tuning.size_dataset(data), gpubatch.classes(data, ultra.datasets_dir()))


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


def check_node(node: Node) -> None:
    """Every variable a launch reads checked, before anything runs or waits."""
    job.metrics_env(node.environ)  # a bad RIG_METRICS_PORT or token file: one line, before anything runs
    ddp.nccl_timeout(node.environ), ddp.stop_grace(node.environ), ddp.rendezvous_timeout(node.environ)
    ddp.checkpoint_every(node.environ)
    buildlock.stall_s(node.environ), imagecache.max_bytes(node.environ, 0), imagecache.max_age_s(node.environ)
    safefs.share_gid(node.environ)
    nodes.check_master(node.spec, node.master_addresses)
    if warning := nodes.port_warning(node.spec, node.ephemeral_ports):
        _logger.warning("%s", warning)


def world_line(devices: Devices, node: nodes.NodeSpec, per_node: int) -> str:
    world = per_node * node.nnodes
    how = {"gpu": "gpu, nccl", "cpu": "cpu, gloo", "mps": "mps"}[devices.kind]
    if world == 1 and devices.kind != "gpu":
        how = f"{devices.kind}, one process"
    ranks = "rank" if world == 1 else "ranks"
    nodes_ = "node" if node.nnodes == 1 else "nodes"
    per = "rank" if per_node == 1 else "ranks"
    return f"world: {world} {ranks} = {node.nnodes} {nodes_} x {per_node} {per} per node ({how})"


def log_fabric(devices: Devices, found: Fabric) -> None:
    """Several nodes: what the ranks will talk over, and a WARNING when NCCL falls back to sockets."""
    if devices.kind != "gpu":
        _logger.info("%s", fabric.gloo_line(found))
        return
    carried = fabric.transport(found)
    (_logger.info if carried.rdma else _logger.warning)("%s", carried.line())


@dataclass(frozen=True)
class Plan:
    devices: Devices
    node: nodes.NodeSpec
    ranks: Ranks
    args: dict[str, str]  # the trainer's arguments, but the run directory's
    env: dict[str, str]  # what the launch's environment gains
    unset: tuple[str, ...]  # what it loses
    run: runpolicy.RunDir | None  # None: a resumed checkpoint knows its run directory
    task: str  # detect, segment...: how the dataset is checked
    prepare: bool  # the launcher prepares the data before the ranks start
    done: str | None = None  # nothing to run (resume=auto of a finished run): why
    take: runpolicy.RunDir | None = None  # resumed in a folder taken over from a job that no longer runs
    checkpoint: resumecopy.Checked | None = None  # a resume: the checkpoint checked, to copy for the ranks
    private: Path | None = None  # its private copy's folder, removed when the launch ends


def decide(request: Request, node: Node, run: Run) -> Plan:
    """The plan of one node: its ranks, the trainer's arguments and environment, the run's folder."""
    devices, spec, seen = request.devices, node.spec, run.seen
    check_node(node)
    if devices.kind == "mps" and spec.nnodes > 1:
        raise RigError(
            "trains in one process; unset NNODES (or the scheduler's node count)",
            option="device",
            value="mps",
        )
    placed = place_ranks(devices, node.topology)
    nranks, rank_cpus = len(placed.bindings), len(placed.bindings[0].cpus)
    if devices.kind == "cpu" and nranks * spec.nnodes > 1 and not ultracheck.feature_on(contract.CPU_RANKS):
        raise RigError(
            f"CPU ranks need what Ultralytics {ultracheck.installed().version} lacks (the WARNING above); "
            "train in one process (--cpu-ranks 1) or use the image's Ultralytics",
            ultracheck.EXIT_CODE,
        )
    world = nranks * spec.nnodes
    batch.check(request.args, world)
    if seen.located.new_folder and node.identity is None and spec.nnodes > 1:
        raise RigError(
            f"{spec.nnodes} nodes started by hand cannot agree on a new run directory: set RDZV_ID "
            "to one value for this run on every node (a restart with the same RDZV_ID and resume=auto "
            "continues it), or give name= with exist_ok=True"
        )
    _logger.info("%s", world_line(devices, spec, nranks))
    if node.fabric is not None:
        log_fabric(devices, node.fabric)
    auto = runpolicy.AutoResume(dict(request.args))
    if seen.located.auto_resume:
        auto = runpolicy.auto_resume(request.args, seen, node.identity)
        if auto.done:
            return Plan(devices, spec, placed, auto.args, {}, (), None, "", False, auto.done)
    gpus = gpubatch.of_run(
        node.gpus, node.gpus_state, [b.gpu_bus_id for b in placed.bindings if b.gpu_bus_id]
    )
    facts = trainargs.Facts(
        world=world,
        cpu=devices.kind != "gpu",
        device=device_arg(devices, placed),
        found=node.found,
        runs_dir=node.runs_dir,
        newest_last=seen.newest_last,
        loader=tuning.Node(node.resources, run.dataset, rank_cpus=rank_cpus, nranks=nranks),
        gpus=batch.Gpus(*gpus, classes=run.classes) if devices.kind == "gpu" else None,
        gpu_names=tuple(g.name for g in gpus[0]),
        torch=node.torch,
        lever_records=node.lever_records,
        follow_records=steplevers.following(node.environ),
    )
    decided = trainargs.decide(auto.args, facts, smart_value=ultra.smart_value)
    folder = auto.folder
    if not decided.resuming and folder is None:
        folder = runpolicy.folder(seen, node.identity, exist_ok=decided.exist_ok)
    run_gpus = job.run_gpus(placed.bindings, placed.gpu_ids) if devices.kind == "gpu" else None
    env = {**job.train_env(node.user_environ, node.environ, rank_cpus, run_gpus), **decided.env}
    alone = devices.kind != "gpu" and world == 1
    unset = tuple(v for v in RENDEZVOUS_VARIABLES if v in node.environ) if alone else ()
    task = trainargs.guess_task(decided.args)
    wanted = prepare.wanted(decided.args, task, world)
    plan = Plan(devices, spec, placed, decided.args, env, unset, folder, task, wanted, take=auto.take)
    return dataclasses.replace(plan, checkpoint=runpolicy.checkpoint(seen, decided.resuming))


# ---------------------------------------------------------------------------------------------
# The two steps that write, each skipped by a dry run.


def reserve_run_dir(plan: Plan) -> Plan:
    """Claim the run's folder (rig.launch.runpolicy.reserve): the one the plan names, or, when another
    launch took that name meanwhile, the next; the nodes of one job all end in the same."""
    return dataclasses.replace(plan, run=runpolicy.reserve(plan.run, plan.take))


def copy_checkpoint(plan: Plan) -> Plan:
    """A resume: the checkpoint opened and checked at discovery, copied from that descriptor into a
    private folder (rig.launch.resumecopy); the ranks' model= (and resume=PATH) name the copy, so
    they load what was checked whatever happens to the path. Removed when the launch ends."""
    if plan.checkpoint is None:
        return plan
    made = resumecopy.copy(plan.checkpoint)
    plan.checkpoint.close()
    args = dict(plan.args, model=str(made.file))
    if isinstance(trainargs.resume_of(args), str):
        args["resume"] = str(made.file)
    _logger.info("resuming %s: the ranks load a private copy of it, %s", plan.checkpoint.path, made.file)
    env = dict(plan.env, **{resumecopy.NAMED_ENV: str(plan.checkpoint.path)})
    return dataclasses.replace(plan, args=args, env=env, private=made.folder)


def prepare_data(plan: Plan) -> Plan:
    """What runs once per node before any rank waits on another: the dataset check (and any download),
    the label scan and the node image cache (rig.yolo.nodecache.prepare). rig's reading of data=
    (rig.yolo.datasets.check) comes first: what would block Ultralytics' reader (a FIFO), take
    minutes to parse, or fail only inside the trainer (an empty split) is one line here."""
    data = plan.args.get("data")
    if data:
        try:
            datasets.check(data, ultra.datasets_dir())
        except datasets.DatasetError as e:
            raise RigError(str(e)) from None
        try:
            ultra.check_dataset(data, plan.task)
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
    private = str(plan.private) if plan.private else None
    if plan.devices.kind != "gpu" and len(plan.ranks.bindings) * plan.node.nnodes == 1:
        return job.Launch(program, env, unset=plan.unset, private=private)
    command = job.torchrun_command(plan.ranks.bindings, plan.node, program, python, "one")
    return job.Launch(command, env, private=private)


def plan_train(
    kv_args: Sequence[str],
    *,
    gpus: str | None = None,
    cpu_ranks_given: str | None = None,
    read_topology: Callable[[], Topology] = job.topology,
    dry_run: bool = False,
    environ: Mapping[str, str] | None = None,
    read_fabric: Callable[[], Fabric] | None = None,
) -> job.Launch:
    """The whole pipeline: what `rig train` runs (a dry run: the same, without the writing steps)."""
    env = os.environ if environ is None else environ
    request = parse(kv_args, gpus=gpus, cpu_ranks_given=cpu_ranks_given, environ=env)
    node = discover(env, read_topology, rig.USER_ENVIRON, read_fabric=read_fabric)
    plan = decide(request, node, discover_run(request.args, node))
    if not dry_run and not plan.done:
        plan = copy_checkpoint(reserve_run_dir(prepare_data(plan)))
    return assemble(plan)
