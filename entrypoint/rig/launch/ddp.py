"""How the ranks of one job hold together: the process group, its timeout, the stop agreement and
the stop deadline. Pure decisions of the environment; the trainer and the torchrun shim apply them.

Ultralytics' own `_setup_ddp` sets TORCH_NCCL_BLOCKING_WAIT=1 with a 3-hour timeout, which makes
libtorch ignore TORCH_NCCL_ASYNC_ERROR_HANDLING: a lost rank or node blocks the others for up to 3 h.
rig's trainer sets the process group up itself, with RIG_NCCL_TIMEOUT and async error handling, so
a stuck job ends in minutes with an error naming the collective that timed out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rig import envnumbers
from rig.launch import levers
from rig.yolo import ultra

# Long enough for what rank 0 does alone while the others wait in a collective (building the label
# cache of a large dataset, a validation pass), short enough that a dead rank costs minutes.
NCCL_TIMEOUT_S = 1800
# torchrun kills its ranks 30 s after forwarding a stop signal; this replaces those 30 s. Below
# compose's stop_grace_period (120 s), so the ranks save before Docker kills the container.
STOP_GRACE_S = 90
STOP_GRACE_ENV = "RIG_STOP_GRACE"
# torch's static rendezvous gives up after this long when a node does not join (its TCPStore timeout).
RDZV_TIMEOUT_S = 600
# Rank 0 writes a checkpoint inside an epoch at most this often (a batch boundary after it): what a
# SIGKILL (the OOM killer, a lost node, a grace that ran out) can cost at most.
CHECKPOINT_EVERY_S = 900
CHECKPOINT_EVERY_ENV = "RIG_CHECKPOINT_EVERY"
# The ranks agree on a stop every this many batches (one tiny all-reduce and a host sync), not at
# every batch: a stop lands at most this many batches later.
STOP_CHECK_EVERY = 10


NCCL_TIMEOUT_ENV = "RIG_NCCL_TIMEOUT"
NCCL_TIMEOUT = envnumbers.Number(
    NCCL_TIMEOUT_ENV,
    low=60,
    high=86400,
    default=NCCL_TIMEOUT_S,
    unit="seconds",
    whole=True,
    hint="how long ranks wait for a stuck or lost rank",
)
STOP_GRACE = envnumbers.Number(
    STOP_GRACE_ENV,
    low=1,
    high=3600,
    default=STOP_GRACE_S,
    unit="seconds",
    whole=True,
    hint="keep it below Docker's stop timeout, Kubernetes' terminationGracePeriodSeconds or Slurm's KillWait",
)
CHECKPOINT_EVERY = envnumbers.Number(
    CHECKPOINT_EVERY_ENV,
    low=0,
    high=7 * 86400,
    default=CHECKPOINT_EVERY_S,
    unit="seconds",
    whole=True,
    hint="what a SIGKILL may cost at most; 0 saves at epoch ends only",
)
RDZV_TIMEOUT = envnumbers.Number(
    "RIG_RDZV_TIMEOUT",
    low=10,
    high=86400,
    default=RDZV_TIMEOUT_S,
    unit="seconds",
    whole=True,
    hint="how long node 0 waits for the other nodes, and they for node 0, e.g. while a scheduler finds GPUs",
)


def nccl_timeout(environ: Mapping[str, str]) -> int:
    """RIG_NCCL_TIMEOUT: seconds a collective may wait before the job fails (default 30 min)."""
    return NCCL_TIMEOUT.read_int(environ)


def stop_grace(environ: Mapping[str, str]) -> int:
    """RIG_STOP_GRACE: seconds the ranks get after a stop signal before torchrun kills them."""
    return STOP_GRACE.read_int(environ)


def checkpoint_every(environ: Mapping[str, str]) -> int:
    """RIG_CHECKPOINT_EVERY: seconds between rank 0's checkpoints inside an epoch; 0: at epoch ends only."""
    return CHECKPOINT_EVERY.read_int(environ)


def rendezvous_timeout(environ: Mapping[str, str]) -> int:
    """RIG_RDZV_TIMEOUT: seconds the nodes of a multi-node job wait for each other to start."""
    return RDZV_TIMEOUT.read_int(environ)


@dataclass(frozen=True)
class DdpSetup:
    device_index: int | None  # the CUDA device this rank uses; None: the CPU (gloo)
    backend: str
    timeout_s: int


def ddp_setup(environ: Mapping[str, str], device_arg: str, local_rank: int, cuda: bool) -> DdpSetup:
    """The rank's device and process group. One device is the rank's own (the trainer sets the
    binder's choice, rig.rankenv, as device=); a list: the rank's entry, as Ultralytics does."""
    timeout = nccl_timeout(environ)
    if not cuda:
        return DdpSetup(None, "gloo", timeout)
    devices = [d.strip() for d in device_arg.split(":", 1)[-1].split(",") if d.strip()]
    if len(devices) == 1:
        index = int(devices[0])
    else:
        index = int(devices[local_rank]) if local_rank < len(devices) else local_rank
    return DdpSetup(index, "nccl", timeout)


def stop_check_due(batches_done: int, distributed: bool) -> bool:
    """Whether the ranks agree on a stop after this batch (every batch when there is one process)."""
    return not distributed or batches_done % STOP_CHECK_EVERY == 0


RECT_WARNING = (
    "rect={value} with {world} ranks: rect is off for training, as Ultralytics turns it off under DDP "
    "(rect batches are not shuffled, and the ranks would get different numbers of batches: DDP hangs); "
    "validation still uses rectangular batches"
)


def without_rect(
    user_args: Mapping[str, str], world: int, typed: Callable[[str], Any] | None = None
) -> tuple[dict[str, str], str | None]:
    """The arguments for `world` ranks with rect= off for training, and the WARNING that says so
    (Ultralytics' own check runs only in its DDP parent, which rig's torchrun launch replaces)."""
    args = dict(user_args)
    if world <= 1 or not levers.switched_on(args.get("rect"), typed or ultra.smart_value):
        return args, None
    warning = RECT_WARNING.format(value=args["rect"], world=world)
    args["rect"] = "False"
    return args, warning
