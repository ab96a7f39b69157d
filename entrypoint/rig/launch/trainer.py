"""What each rank runs: `python -m rig.launch.trainer key=value ...` -> YOLO(model).train(**args).

The trainer class is rig's, in front of the task's Ultralytics trainer (rig.yolo.trainer: torchrun's
global WORLD_SIZE, stops that keep the work, checkpoints inside an epoch, exact resume); its rank
side is rig.launch.rankside (the agreed stop, the process group, CPU ranks, SyncBatchNorm, atomic
writes). A stop signal only sets a flag; the ranks agree on it between batches, rank 0 saves at that
batch boundary and every rank exits 128 + the signal. The features the installed Ultralytics lacks
names for are off, as the launcher said before anything started (rig.yolo.contractcheck).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rig import log, program, rankenv
from rig.errors import RigError
from rig.instrument import metrics, telemetry
from rig.launch import ddp, rankside, resumecopy
from rig.yolo import contract, resumable, ultra, ultracheck
from rig.yolo import trainer as yolo_trainer

_logger = log.get("trainer")
# Every way a run is stopped from outside: `docker stop`, Kubernetes and Slurm (TERM), Ctrl-C (INT,
# which torchrun forwards to the ranks), a dropped SSH connection (HUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP = rankside.STOP
USAGE = 2  # a bad argument or setting exits 2, as an Ultralytics it cannot train with does (ultracheck)


# Names and paths stay strings: name=2024 is a directory, not a number.
_STRING_KEYS = frozenset({"name", "project", "data", "model", "device", "tracker", "cfg"})


def parse_args(argv: Sequence[str], smart_value: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """key=value typed by Ultralytics' own CLI rule (ultralytics.cfg.smart_value: 'True' -> True,
    '16' -> 16, 'none' -> None), except names and paths."""
    typed = smart_value or ultra.smart_value
    args: dict[str, Any] = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RigError(f"expected key=value, got {item!r}", USAGE)
        args[key] = value if key in _STRING_KEYS else typed(value)
    return args


def _global_world_size() -> int:
    return rankenv.world_size(os.environ)


def rig_trainer_class(
    base: type, *, checkpoint_every: float = float(ddp.CHECKPOINT_EVERY_S), features_on: Any = None
) -> type[yolo_trainer.RigTrainer]:
    """base (the task's Ultralytics trainer) as this rank trains it (rig.yolo.trainer)."""
    on: Callable[[contract.Feature], bool] = features_on or ultracheck.installed().feature_on
    rank = rankside.LaunchRank(checkpoint_every=checkpoint_every, features_on=on)
    return yolo_trainer.for_task(base, rank)


@program.entry("trainer")
def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    with program.bad_input_exits(USAGE):
        every = ddp.checkpoint_every(os.environ)
    verdict = ultracheck.decide(ultracheck.installed(), ultracheck.pinned())
    if verdict.error is not None:  # the launcher said so already, where a launcher started it
        raise RigError(verdict.error, ultracheck.EXIT_CODE)
    for sig in STOP_SIGNALS:
        signal.signal(sig, STOP.handler)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if (device := rankenv.cuda_device(os.environ)) is not None and _global_world_size() > 1:
        # The binder chose this rank's GPU (and gave it alone, CUDA_VISIBLE_DEVICES): Ultralytics and
        # rig.launch.ddp use that one device, never the node's list. The trainer counts the world
        # from WORLD_SIZE.
        args["device"] = str(device)
    rank = rankenv.rank(os.environ)
    checked = ultracheck.installed()
    model = _load(str(args.pop("model", "yolo11n.pt")), checked.version)
    if args.get("resume") is True and resumable.position(model.ckpt) is not None:
        # Ultralytics' resume=True refuses a checkpoint at epoch -1 (a stop in the first epoch) before
        # the trainer exists; the checkpoint's path, its other form, leaves the decision to the trainer.
        args["resume"] = model.ckpt_path
    if args.get("resume") and rank == 0 and (note := other_version(model.ckpt, checked.version)):
        _logger.warning("%s: %s", resumecopy.named(os.environ, str(model.ckpt_path)), note)
    if rank == 0:
        telemetry.attach(model, rankenv.run_dir(os.environ))
    if checked.feature_on(contract.METRICS):
        metrics.attach(model)  # this rank's series; served here when no launcher serves the node
    trainer_cls = rig_trainer_class(
        model.task_map[model.task]["trainer"], checkpoint_every=every, features_on=checked.feature_on
    )
    model.train(trainer=trainer_cls, **args)  # a RigError before training began: one line (rig.program)
    return _exit_code(model.trainer, rank)


def _load(model: str, version: str) -> contract.Model:
    """Ultralytics' model of weights or a yaml; one line where this Ultralytics cannot load it (a
    checkpoint of another release pickles classes this one may lack)."""
    try:
        return ultra.yolo(model)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        named = resumecopy.named(os.environ, model)
        raise RigError(
            f"{named}: Ultralytics {version} cannot load it ({type(e).__name__}: {first}); a checkpoint of "
            "another Ultralytics release loads with that release (`rig --version` says which this is)",
            ultracheck.EXIT_CODE,
        ) from None


def other_version(ckpt: contract.Checkpoint | None, version: str) -> str | None:
    """The WARNING for a resume from a checkpoint another Ultralytics release wrote; None for its own."""
    saved = (ckpt or {}).get("version")
    if not saved or not version or saved == version:
        return None
    return (
        f"written by Ultralytics {saved}, resumed with {version}: training continues, but exactly where "
        f"it stopped only with the release that wrote it (the draws and the loss may differ)"
    )


def _exit_code(trainer: yolo_trainer.RigTrainer, rank: int) -> int:
    """128 + the signal on every rank of a run the ranks agreed to stop, whichever rank got it (a
    scheduler must not count a stopped job as done); 0 for a run that finished, even when a signal
    came after its last stop check (it is finished: there is nothing to resume)."""
    agreed = trainer.rig_stop_signal
    if not agreed:
        if STOP.signum and rank == 0:
            _logger.info("signal %d came after the last epoch: the run finished", STOP.signum)
        return 0
    if rank == 0:
        _logger.info(
            "stopped by signal %d; kept %s; %s",
            agreed,
            trainer.last,
            resume_hint(trainer.last, trainer.epoch, trainer.epochs),
        )
    return 128 + agreed


def resume_hint(last: Path | None, epoch: int, epochs: int) -> str:
    """How to continue a run of `epochs` stopped in `epoch` (0-based): rig's resume first (exactly
    where it stopped), then what stock Ultralytics' resume does with the checkpoint (it resumes at
    the epoch after its `epoch` key, in the run's folder: rig.yolo.resumable.stock_epoch)."""
    hint = (
        f"continue exactly where it stopped with the same `rig train` command and resume=auto "
        f"(or `rig train resume=True model={last}`)"
    )
    stock = f"stock Ultralytics' `yolo train resume=True model={last}`"
    if epoch >= 1:
        return f"{hint}; {stock} reruns epoch {epoch + 1} from its start"
    if epochs > 1:
        return f"{hint}; {stock} continues at epoch 2 (the rest of epoch 1 is not trained)"
    return f"{hint}; {stock} takes this 1-epoch run as finished"


if __name__ == "__main__":
    sys.exit(main())
