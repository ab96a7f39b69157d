"""Multi-node: which node this is and where the rendezvous lives, from the variables schedulers set.

Our own NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT win; then Slurm (one task per node), then Kubeflow's
PyTorchJob (PET_* and its MASTER_ADDR/WORLD_SIZE/RANK, one pod per node) or TrainJob (Trainer v2: its
torch plugin sets PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT
only). The result becomes
torchrun's static rendezvous, which honours the node rank and MASTER_ADDR (job.torchrun_command).

Slurm: the step's variables over the job's (`srun -N1` inside a two-node allocation is a one-node
step); the node list read with python-hostlist, Slurm's own syntax (`gpu[01-02]-ib`, several
brackets, padding); the port from the job id, as enroot 4's PyTorch hook computes it (above the
ephemeral range; enroot 3.x's is inside it, port_warning), so two jobs that share node 0 never
collide. Slurm comes before Kubeflow because that hook (Pyxis, images with
PYTORCH_VERSION) also sets MASTER_ADDR, WORLD_SIZE and RANK, counting tasks, not nodes.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import hostlist  # type: ignore[import-untyped]

from rig import envnumbers
from rig.errors import RigError
from rig.launch import slurmjobs

DEFAULT_PORT = 29500
MAX_PORT = 65535
# A Slurm job's port: 61000 + job id mod 4536, ports 61000-65535, above Linux's default ephemeral
# range (32768-60999), so no outgoing connection of the node holds one. enroot 4's PyTorch hook
# (50-slurm-pytorch.sh) computes the same; enroot up to 3.5 computes 49152 + job id mod 16384,
# inside that range (a port some connection may hold: EADDRINUSE at the rendezvous). The sbatch
# exports MASTER_PORT itself, so neither hook's value applies; check_port warns of one that would.
SLURM_PORT_BASE = 61000
SLURM_PORT_SPAN = 4536
EPHEMERAL_RANGE = "proc/sys/net/ipv4/ip_local_port_range"


@dataclass(frozen=True)
class NodeSpec:
    nnodes: int
    node_rank: int
    master_addr: str | None
    master_port: int
    rdzv_id: str
    source: str  # rig, kubeflow, slurm or single


def _int(environ: Mapping[str, str], name: str, minimum: int, maximum: int | None = None) -> int:
    return envnumbers.Number(name, low=minimum, high=maximum, whole=True).read_int(environ)


def hostnames(nodelist: str, name: str = "SLURM_JOB_NODELIST") -> list[str]:
    """A Slurm node list's hosts in Slurm's order: 'gpu[01-02]-ib,cpu1' -> gpu01-ib, gpu02-ib, cpu1."""
    try:
        hosts = [str(h) for h in hostlist.expand_hostlist(nodelist.strip())]
    except hostlist.BadHostlist as e:
        raise RigError(f"cannot read {name}={nodelist!r} ({e}); set MASTER_ADDR to the first node") from None
    if not hosts:
        raise RigError(f"{name} is empty; set MASTER_ADDR to the first node")
    return hosts


def slurm_port(job_id: str) -> int | None:
    """The job's rendezvous port (enroot 4's formula, the sbatch's); None without a job id."""
    return SLURM_PORT_BASE + int(job_id) % SLURM_PORT_SPAN if job_id.strip().isdigit() else None


def _first(environ: Mapping[str, str], names: Sequence[str]) -> str | None:
    return next((n for n in names if environ.get(n, "").strip()), None)


def _slurm(env: Mapping[str, str], port: int) -> tuple[int, int, str | None, int, str]:
    """Slurm's node count, node rank, master address, port and rendezvous id: the step's over the job's."""
    count = _first(env, ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"))
    nnodes = _int(env, count, 1) if count else 1
    tasks = env.get("SLURM_STEP_NUM_TASKS", "").strip()
    if tasks.isdigit() and int(tasks) > nnodes:
        raise RigError(
            f"Slurm started {tasks} tasks on {nnodes} node(s); rig train wants one task per node "
            "(srun --ntasks-per-node=1) and starts a rank per GPU itself"
        )
    rank = _int(env, "SLURM_NODEID", 0) if "SLURM_NODEID" in env else 0
    addr = env.get("MASTER_ADDR", "").strip() or None
    if addr is None and nnodes > 1:
        listed = _first(env, ("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"))
        addr = hostnames(env[listed], listed)[0] if listed else None
    job = env.get("SLURM_JOB_ID", "").strip()
    if not env.get("MASTER_PORT"):
        port = slurm_port(job) or port
    return nnodes, rank, addr, port, env.get("RDZV_ID") or job or "yolo-rig"


def node_spec(environ: Mapping[str, str]) -> NodeSpec:
    env = environ
    port = _int(env, "MASTER_PORT", 1, MAX_PORT) if env.get("MASTER_PORT") else DEFAULT_PORT
    if "NNODES" in env:
        nnodes, rank, source = (
            _int(env, "NNODES", 1),
            _int(env, "NODE_RANK", 0) if "NODE_RANK" in env else 0,
            "rig",
        )
        addr = env.get("MASTER_ADDR")
        rdzv = env.get("RDZV_ID", "yolo-rig")
    elif "PET_NNODES" not in env and _first(
        env, ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    ):
        source = "slurm"
        nnodes, rank, addr, port, rdzv = _slurm(env, port)
    elif "PET_NNODES" in env or ("MASTER_ADDR" in env and "WORLD_SIZE" in env and "RANK" in env):
        source = "kubeflow"
        if "PET_NNODES" in env and env["PET_NNODES"].isdigit():
            nnodes = _int(env, "PET_NNODES", 1)
        else:
            per_node = env.get("PET_NPROC_PER_NODE", "1")
            nnodes = _int(env, "WORLD_SIZE", 1) // (int(per_node) if per_node.isdigit() else 1)
        rank = _int(env, "PET_NODE_RANK", 0) if "PET_NODE_RANK" in env else _int(env, "RANK", 0)
        addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
        if env.get("PET_MASTER_PORT"):
            port = _int(env, "PET_MASTER_PORT", 1, MAX_PORT)
        rdzv = env.get("RDZV_ID") or env.get("JOB_NAME") or job_name(env) or "yolo-rig"
    else:
        return NodeSpec(1, 0, None, port, "yolo-rig", "single")

    if rank >= nnodes:
        raise RigError(f"node rank {rank} is not below the node count {nnodes}; number nodes 0..{nnodes - 1}")
    if nnodes > 1 and not addr:
        raise RigError(
            f"{nnodes} nodes but no MASTER_ADDR: set MASTER_ADDR to the host name of node 0 on every node"
        )
    return NodeSpec(nnodes, rank, addr, port, rdzv, source)


def ephemeral_ports(root: Path = Path("/")) -> tuple[int, int] | None:
    """The node's ephemeral port range (the ports the kernel gives outgoing connections), from
    root's /proc/sys/net/ipv4/ip_local_port_range; None when it cannot be read."""
    try:
        low, high = (int(v) for v in (root / EPHEMERAL_RANGE).read_text()[:64].split())
    except (OSError, ValueError):
        return None
    return (low, high) if 0 < low <= high <= MAX_PORT else None


def port_warning(node: NodeSpec, ephemeral: tuple[int, int] | None) -> str | None:
    """Several nodes and a rendezvous port inside node 0's ephemeral range: any outgoing connection
    of node 0 may hold it when the store binds there (EADDRINUSE), by chance. None: nothing to say
    (on the other nodes too: they only connect to it)."""
    if node.nnodes <= 1 or node.node_rank != 0 or ephemeral is None:
        return None
    if not ephemeral[0] <= node.master_port <= ephemeral[1]:
        return None
    return (
        f"the rendezvous port {node.master_port} is inside this node's ephemeral range "
        f"{ephemeral[0]}-{ephemeral[1]} (/{EPHEMERAL_RANGE}): an outgoing connection may hold it when "
        "node 0's store starts (EADDRINUSE); enroot 3.x's PyTorch hook picks such ports (49152 + job id "
        "mod 16384): export MASTER_PORT above the range (the sbatch does: 61000 + job id mod 4536)"
    )


Resolver = Callable[[str], Sequence[str]]


def resolve(host: str) -> list[str]:
    """The addresses host resolves to on this node; [] when it does not resolve here."""
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host.strip("[]"), None)})
    except (OSError, UnicodeError):
        return []


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_master(node: NodeSpec, addresses: Sequence[str]) -> None:
    """Several nodes and a master address that means this node only (it resolves to loopback): node
    0's store would listen where no other node can reach it, and they would wait for the rendezvous
    timeout. One line, before anything waits. addresses: what it resolves to here (resolve)."""
    if node.nnodes <= 1 or node.master_addr is None or not addresses:
        return
    if all(_is_loopback(a) for a in addresses):
        raise RigError(
            f"the master address {node.master_addr} resolves to {', '.join(addresses)} here, the loopback: "
            f"the other {node.nnodes - 1} node(s) cannot reach node 0's store there (Debian and Ubuntu map "
            "the host name to 127.0.1.1 in /etc/hosts); set MASTER_ADDR to node 0's routable host name or "
            "address on every node"
        )


# Kubeflow Trainer v2's torch plugin hands every node PET_MASTER_ADDR=<job>-node-0-0.<job>: the pod
# of job 0, index 0, of the TrainJob's `node` replicated job, under the JobSet's headless service
# (named after the job). A cluster domain after it (.<namespace>.svc...) names the same pod.
_TRAINJOB_MASTER = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-node-0-0\.(?P=job)(\..*)?$")


def job_name(environ: Mapping[str, str]) -> str | None:
    """The scheduler's name for this job, the same on every node and across its restarts: Slurm's
    job id (a requeued job keeps it), a Kubeflow job's name, read from the master address it hands
    every pod, as neither operator sets a variable of the job's name: a PyTorchJob's master pod is
    `<job>-master-0` (the training operator, v1), a TrainJob's `<job>-node-0-0.<job>` (Trainer v2).
    None outside a scheduler."""
    if environ.get("SLURM_JOB_ID", "").strip():
        return f"slurm-{environ['SLURM_JOB_ID'].strip()}"
    master = (environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR") or "").strip()
    if "PET_NNODES" in environ or "PET_MASTER_ADDR" in environ:
        if trainjob := _TRAINJOB_MASTER.match(master):
            return trainjob.group("job")
        name = master.removesuffix("-master-0")
        if name and name != master:
            return name
    return None


RDZV_ID_ENV = "RDZV_ID"


def job_identity(environ: Mapping[str, str]) -> str | None:
    """Who owns a run directory (rig.launch.rundir): a Slurm job's step on its cluster
    (rig.launch.slurmjobs), another scheduler's job (job_name), else RDZV_ID, the one value every
    node of a run started by hand shares; None: this launch alone."""
    slurm = slurmjobs.from_environ(environ)
    if slurm is not None:
        return slurm.identity
    return job_name(environ) or environ.get(RDZV_ID_ENV, "").strip() or None
