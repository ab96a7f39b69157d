"""Multi-node: which node this is and where the rendezvous lives, from the variables schedulers set.

Our own NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT win; then Kubeflow's PyTorchJob (PET_* and its
MASTER_ADDR/WORLD_SIZE/RANK, one pod per node); then Slurm (one task per node). The result becomes
torchrun's static rendezvous, which honours the node rank and MASTER_ADDR (job.torchrun_command).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rig.errors import RigError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class NodeSpec:
    nnodes: int
    node_rank: int
    master_addr: str | None
    master_port: int
    rdzv_id: str
    source: str  # rig, kubeflow, slurm or single


def _int(environ: Mapping[str, str], name: str, minimum: int) -> int:
    raw = environ[name]
    try:
        value = int(raw)
    except ValueError:
        raise RigError(f"{name}={raw!r} is not a number; set it to an integer >= {minimum}") from None
    if value < minimum:
        raise RigError(f"{name}={value} is too small; set it to an integer >= {minimum}")
    return value


def first_host(nodelist: str) -> str:
    """The first host of a Slurm nodelist: 'gpu[03-05,9],cpu1' -> 'gpu03'."""
    m = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise RigError(f"cannot read SLURM_JOB_NODELIST={nodelist!r}; set MASTER_ADDR to the first node")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def node_spec(environ: Mapping[str, str]) -> NodeSpec:
    env = environ
    port = _int(env, "MASTER_PORT", 1) if env.get("MASTER_PORT") else DEFAULT_PORT
    if "NNODES" in env:
        nnodes, rank, source = (
            _int(env, "NNODES", 1),
            _int(env, "NODE_RANK", 0) if "NODE_RANK" in env else 0,
            "rig",
        )
        addr = env.get("MASTER_ADDR")
        rdzv = env.get("RDZV_ID", "yolo-rig")
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
            port = _int(env, "PET_MASTER_PORT", 1)
        rdzv = env.get("RDZV_ID") or env.get("JOB_NAME") or "yolo-rig"
    elif "SLURM_JOB_NUM_NODES" in env or "SLURM_NNODES" in env:
        source = "slurm"
        nnodes = _int(env, "SLURM_JOB_NUM_NODES" if "SLURM_JOB_NUM_NODES" in env else "SLURM_NNODES", 1)
        rank = _int(env, "SLURM_NODEID", 0) if "SLURM_NODEID" in env else 0
        addr = env.get("MASTER_ADDR") or (
            first_host(env["SLURM_JOB_NODELIST"]) if env.get("SLURM_JOB_NODELIST") else None
        )
        rdzv = env.get("RDZV_ID") or env.get("SLURM_JOB_ID") or "yolo-rig"
    else:
        return NodeSpec(1, 0, None, port, "yolo-rig", "single")

    if rank >= nnodes:
        raise RigError(f"node rank {rank} is not below the node count {nnodes}; number nodes 0..{nnodes - 1}")
    if nnodes > 1 and not addr:
        raise RigError(
            f"{nnodes} nodes but no MASTER_ADDR: set MASTER_ADDR to the host name of node 0 on every node"
        )
    return NodeSpec(nnodes, rank, addr, port, rdzv, source)


def job_name(environ: Mapping[str, str]) -> str | None:
    """The scheduler's name for this job, the same on every node and across its restarts: Slurm's
    job id (a requeued job keeps it), a PyTorchJob's name (the operator names the master pod
    `<job>-master-0` and hands that to every pod as MASTER_ADDR; it sets no variable of the job's
    name). None outside a scheduler."""
    if environ.get("SLURM_JOB_ID", "").strip():
        return f"slurm-{environ['SLURM_JOB_ID'].strip()}"
    master = environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR") or ""
    if "PET_NNODES" in environ or "PET_MASTER_ADDR" in environ:
        name = master.removesuffix("-master-0")
        if name and name != master:
            return name
    return None
