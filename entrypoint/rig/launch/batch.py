"""The batch of a `rig train`, decided once: the batch= the trainer gets, each rank's share of it, and
the one line that says why. What else depends on the batch reads this decision, never batch= again:
the loader's /dev/shm (rig.yolo.tuning) and the step levers' record (rig.launch.steplevers).

- batch= given: checked first (`check`: a number; over several ranks a whole total they split
  evenly), then used as it is.
- none given, on GPUs, no resume: the per-GPU batch their memory holds (rig.yolo.gpubatch), times the
  world, on one GPU too.
- none given otherwise: Ultralytics' default per GPU times the world (Ultralytics alone would split
  its 16 over the world: 3 GPUs train with 15, 24 ranks with 0); on one rank, Ultralytics' own.
- a resume: the checkpoint's.

`Found`'s default batch and nbs (Ultralytics' defaults) and its smart_value come in as parameters,
so the rules are pure functions a test calls directly; the decision logs its one INFO line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rig import log
from rig.errors import RigError
from rig.yolo import gpubatch

_logger = log.get("launch")

# The per-rank batch Ultralytics' AutoBatch may pick (batch=-1 or a fraction) is unknown before
# training; the loader's /dev/shm is sized for a large one.
AUTOBATCH_ASSUMED = 64


@dataclass(frozen=True)
class Gpus:
    """The run's GPUs as the batch needs them (discovery's reading; none on the CPU)."""

    memory: Sequence[gpubatch.GpuMemory]  # each GPU's name and memory (rig.yolo.gpubatch.of_run)
    state: str  # "ok", or why their memory was not read
    classes: int  # the dataset's class count: the detection loss's memory


@dataclass(frozen=True)
class Batch:
    total: int | None  # the batch= rig gives the trainer; None: the user's own, Ultralytics', a resume's
    per_rank: int  # images a rank loads per step (AUTOBATCH_ASSUMED under AutoBatch): /dev/shm's size
    whole: bool  # per_rank is the run's real per-GPU batch (not AutoBatch's, not a resume's): levers' key
    reason: str | None  # why rig chose `total` (None: it chose nothing)


def _resuming(args: Mapping[str, str]) -> bool:
    return args.get("resume", "").strip().lower() not in {"", "false", "none"}


def check(user_args: Mapping[str, str], world: int) -> None:
    """batch= as given: a number; over several ranks a whole total divisible by them (AutoBatch's -1
    or a fraction works on one GPU only). One line naming the option, before anything is read."""
    raw = user_args.get("batch")
    if raw is None:
        return
    try:
        batch = float(raw)
    except ValueError:
        raise RigError(
            "not a number; give the total batch over all ranks, e.g. 16", option="batch", value=raw
        ) from None
    if world <= 1:
        return
    if batch < 1 or batch != int(batch):
        raise RigError(
            f"AutoBatch works on one GPU only; give a total batch divisible by the {world} ranks, "
            f"e.g. {world * 8}",
            option="batch",
            value=raw,
        )
    if int(batch) % world:
        lo = max(world, int(batch) // world * world)
        raise RigError(
            f"not divisible by the {world} ranks; use a multiple of {world}, e.g. {lo} or {lo + world}",
            option="batch",
            value=raw,
        )


def share(total: float, world: int, resumed: bool = False) -> Batch:
    """A batch total rig leaves as it is (the user's, Ultralytics' default on one rank, a resume's):
    each rank's share of it. Also what `rig doctor` and `rig bench` size the loader for."""
    if total < 1:  # AutoBatch: -1 or a GPU memory fraction
        return Batch(None, AUTOBATCH_ASSUMED, False, None)
    # Ultralytics splits the batch over the global world size: every rank of every node.
    return Batch(None, max(int(total) // max(world, 1), 1), total == int(total) and not resumed, None)


def decide(
    args: Mapping[str, str],
    *,
    world: int,
    default: float,
    default_nbs: int,
    gpus: Gpus | None,
    typed: Callable[[str], Any],
) -> Batch:
    """The batch of `args` (after the defaults and resume=True's checkpoint) over `world` ranks.
    default, default_nbs: Ultralytics' batch per GPU and nominal batch; gpus: the run's GPUs (None:
    the CPU). `check` came first."""
    if "batch" in args or _resuming(args):
        return share(float(args.get("batch", default)), world, resumed=_resuming(args))
    if gpus is not None:
        nbs = typed(args["nbs"]) if args.get("nbs") else default_nbs
        choice = gpubatch.for_launch(
            args, gpus.memory, gpus.state, world, nc=gpus.classes, nbs=int(nbs), typed=typed
        )
        if choice.measured:
            return _chosen(choice.per_gpu, world, choice.reason)
        _logger.info("batch from the GPUs' memory: %s", choice.reason)  # Ultralytics' default, as below
    if world <= 1:
        return share(default, world)
    if default < 1 or default != int(default):
        raise RigError(
            f"Ultralytics' default batch is {default:g} (AutoBatch), which works on one GPU only; "
            f"give a total batch for the {world} ranks, e.g. batch={world * 16}"
        )
    per_gpu = int(default)
    return _chosen(
        per_gpu,
        world,
        f"Ultralytics' default {per_gpu} per GPU x {world} GPUs (it would split {per_gpu} over them); "
        "give batch= for another total",
    )


def _chosen(per_gpu: int, world: int, reason: str) -> Batch:
    batch = Batch(per_gpu * world, per_gpu, True, reason)
    _logger.info("batch=%d: %s", batch.total, reason)
    return batch


def applied(args: Mapping[str, str], batch: Batch) -> dict[str, str]:
    """args with the batch rig chose (as they are where it chose none)."""
    return {**args, "batch": str(batch.total)} if batch.total is not None else dict(args)
