"""What `rig train` and `rig launch` run, once decided: torchrun over the binder, then a single exec.

The machinery both commands share: the topology, the binding plan, torchrun's command (a static
rendezvous on one node or several), the launch's environment, and the exec, so torchrun's exit code
is the command's exit code. `rig train`'s own pipeline (parse, discover, decide, assemble) is
rig.launch.trainplan; `rig launch`'s is `plan_launch` here.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import rig
from rig import log, rankenv, safepython
from rig.errors import RigError
from rig.hardware.choice import parse_gpus, select_gpus
from rig.hardware.topology import Topology, read_topology
from rig.instrument.metrics import config as metrics_config
from rig.launch import binding, ddp, gpuenv, nodes, resumecopy

_logger = log.get("launch")

TORCHRUN = "rig.launch.torchrun"  # torchrun with rig's stop deadline and a bound store
LOOPBACK = "127.0.0.1"  # where a single node's store, gloo and NCCL listen
BINDER = "rig.launch.binder"  # what torchrun starts for each rank


# ---------------------------------------------------------------------------------------------
# The command: pure functions of the plan and the node.


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
    unset: tuple[str, ...] = ()  # variables the command must not inherit
    private: str | None = None  # a folder of the launch's own (a resume's copy): removed once it ends

    def shell(self) -> str:
        removed = [f"--unset={name}" for name in self.unset]
        return shlex.join(
            ["env", *removed, *(f"{k}={v}" for k, v in sorted(self.env.items())), *self.command]
        )


# ---------------------------------------------------------------------------------------------
# Discover: the topology and the ranks' binding plan.


def topology(sysfs_root: str | None = None, gpu_bus_ids: str | None = None) -> Topology:
    """This machine's topology, or another's: a copy of its /sys and its GPUs' bus ids, in order."""
    ids = [b for b in gpu_bus_ids.split(",") if b.strip()] if gpu_bus_ids else None
    root = Path(sysfs_root) if sysfs_root else Path("/")
    if sysfs_root and not root.is_dir():
        raise RigError(f"--sysfs-root {root} is not a directory; give a copy of a machine's /sys")
    return read_topology(root, ids)


def make_plan(topology: Topology, gpu_ids: list[int]) -> list[binding.RankBinding]:
    plan = binding.make_plan(topology, len(gpu_ids), gpu_ids)
    for warning in plan.warnings:
        _logger.warning("%s", warning)
    return list(plan.ranks)


# ---------------------------------------------------------------------------------------------
# Execute.


def execute(launch: Launch) -> int:
    """Log the decision, then exec it: torchrun's exit code is the command's."""
    env = {k: v for k, v in os.environ.items() if k not in launch.unset} | launch.env
    if launch.private:
        resumecopy.remove_after(Path(launch.private))
    _logger.info("Executing: %s", shlex.join(launch.command))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(launch.command[0], launch.command, env)


def plan_launch(program: Sequence[str], topo: Topology, gpus: str | None = None) -> Launch:
    """What `rig launch` runs: the user's program on each rank, through torchrun and the binder."""
    ddp.stop_grace(os.environ)
    node = nodes.node_spec(os.environ)
    nodes.check_master(node, nodes.resolve(node.master_addr) if node.nnodes > 1 and node.master_addr else [])
    if warning := nodes.port_warning(node, nodes.ephemeral_ports()):
        _logger.warning("%s", warning)
    gpu_ids = select_gpus(parse_gpus(gpus), topo)
    plan = make_plan(topo, gpu_ids)
    return Launch(
        torchrun_command(plan, node, program, sys.executable),
        {
            **env_delta(rig.USER_ENVIRON, os.environ, len(plan[0].cpus)),
            **rankenv.launch_variables(run_gpus(plan, gpu_ids), None),
        },
    )


def env_delta(user_environ: Mapping[str, str], environ: Mapping[str, str], threads: int) -> dict[str, str]:
    """What the job's environment gains. Decided from the environment as rig found it (user_environ):
    importing Ultralytics (for its settings) sets OMP_NUM_THREADS=1, which is not the user's choice."""
    full = gpuenv.updated(user_environ, threads=threads)
    return {k: v for k, v in full.items() if environ.get(k) != v}


def metrics_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What `rig train` adds for the node's /metrics: its launcher serves them. A bad RIG_METRICS_PORT,
    or an unreadable RIG_METRICS_TOKEN_FILE, is one line here, before anything runs."""
    if metrics_config.endpoint(environ) is not None:
        metrics_config.token(environ)
    return metrics_config.node_env()


def train_env(
    user_environ: Mapping[str, str],
    environ: Mapping[str, str],
    threads: int,
    gpus: Sequence[tuple[int, str]] | None,
) -> dict[str, str]:
    """What `rig train`'s launch adds to the environment: the GPU variables (env_delta), the run's
    GPUs (None on the CPU) and the node's /metrics."""
    return {
        **env_delta(user_environ, environ, threads),
        **rankenv.launch_variables(gpus, None),
        **metrics_env(environ),
    }
