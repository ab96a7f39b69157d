"""What each rank runs: `python -m rig.launch.trainer key=value ...` -> YOLO(model).train(**args).

The trainer class is rig's subclass of Ultralytics' (rig.yolo.trainer: torchrun's global
WORLD_SIZE, stops that keep the work, checkpoints inside an epoch, exact resume); this module gives
it the rank's side. A stop signal only sets a flag; the ranks agree on it between batches (an
all-reduce), rank 0 saves at that batch boundary and every rank exits 128 + the signal. The process
group, CPU ranks' corrections, SyncBatchNorm, the checkpoint interval and atomic saves are here and in
the rig.launch modules they name.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from rig import log, rankenv
from rig.errors import RigError
from rig.instrument import metrics, telemetry
from rig.launch import checkpoints, cpuddp, ddp, steplevers, syncbn
from rig.yolo import resumable, ultra
from rig.yolo import trainer as yolo_trainer

_logger = log.get("trainer")
# Every way a run is stopped from outside: `docker stop`, Kubernetes and Slurm (TERM), Ctrl-C (INT,
# which torchrun forwards to the ranks), a dropped SSH connection (HUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _StopFlag:
    """Set by the signal handler, read by the training loop: handlers never act themselves, except
    that a second Ctrl-C stops at once (the way out of a run that will not reach its next batch)."""

    def __init__(self) -> None:
        self.signum = 0

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum


STOP = _StopFlag()


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
            raise SystemExit(f"ERROR trainer: expected key=value, got {item!r}")
        args[key] = value if key in _STRING_KEYS else typed(value)
    return args


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _global_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _agree(trainer: Any, local: int) -> int:
    """The largest of the ranks' values (one all-reduce); local alone without a process group."""
    dist: Any = importlib.import_module("torch.distributed")
    if not (dist.is_available() and dist.is_initialized()):
        return local
    torch: Any = importlib.import_module("torch")
    flag = torch.tensor([local], device=trainer.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def _distributed() -> bool:
    dist: Any = importlib.import_module("torch.distributed")
    return bool(dist.is_available() and dist.is_initialized())


def _stop_agreed(trainer: Any) -> int:
    """The stop signal every rank agrees on once any rank got one (the largest number, if several);
    0: none. Under DDP the ranks compare their signals every ddp.STOP_CHECK_EVERY batches (an
    all-reduce and a host sync), all on the same batches, so a rank that got none knows which."""
    trainer.rig_batches = getattr(trainer, "rig_batches", 0) + 1
    if not ddp.stop_check_due(trainer.rig_batches, _distributed()):
        return 0
    return _agree(trainer, STOP.signum)


def _stop_agreed_in_validation(trainer: Any, done: int, common: int) -> int:
    """As _stop_agreed, during a validation pass: only on batches every rank has (`common`, the
    fewest of any rank: the ranks' shares of the validation set differ by a batch)."""
    distributed = _distributed()
    if distributed and done > common:
        return 0
    if not ddp.stop_check_due(done, distributed):
        return 0
    return _agree(trainer, STOP.signum)


def _fewest(trainer: Any, count: int) -> int:
    if not _distributed():
        return count
    return -_agree(trainer, -count)


class _LaunchRank:
    """The rank's side of rig.yolo.trainer's subclass: process group, agreed stop, CPU ranks,
    SyncBatchNorm, checkpoint interval and atomic saves (rig.yolo.trainer.Rank)."""

    def world_size(self) -> int:
        return _global_world_size()

    def index(self) -> int:
        return _rank()

    def is_first(self) -> bool:
        return _rank() == 0

    def agreed_stop(self, trainer: Any) -> int:
        return _stop_agreed(trainer)

    def agreed_stop_in_validation(self, trainer: Any, done: int, common: int) -> int:
        return _stop_agreed_in_validation(trainer, done, common)

    def fewest(self, trainer: Any, count: int) -> int:
        return _fewest(trainer, count)

    def checkpoint_every(self) -> float:
        return float(_CHECKPOINT_EVERY[0])

    def setup_ddp(self, trainer: Any) -> None:
        _setup_ddp(trainer)

    def best_on_every_rank(self, trainer: Any) -> bool:
        return _best_on_every_rank(trainer)

    def cpu_setup_train(self) -> contextlib.AbstractContextManager[None]:
        return cpuddp.setup_train()

    def cpu_validation(self, validator: Any) -> contextlib.AbstractContextManager[None]:
        return cpuddp.validation(validator)

    def sync_bn_wanted(self) -> bool:
        return syncbn.wanted(os.environ)

    def use_sync_batchnorm(self, trainer: Any) -> None:
        _use_sync_batchnorm(trainer)

    def fused_optimizer_wanted(self) -> bool:
        return steplevers.fused_wanted(os.environ)

    def keep_frozen_in_eval(self, trainer: Any) -> None:
        syncbn.keep_frozen_in_eval(trainer.model, trainer.freeze_layer_names)

    def ema_with_plain_batchnorm(self, trainer: Any) -> None:
        _ema_with_plain_batchnorm(trainer)

    def save(self, ckpt: Any, paths: Sequence[Path]) -> None:
        checkpoints.save(ckpt, paths)

    def atomic_strip(self, strip: Callable[..., Any], drop: Sequence[str]) -> Callable[..., Any]:
        return checkpoints.atomic_strip(strip, drop)


# RIG_CHECKPOINT_EVERY, read once in main (a bad value is one line before anything starts).
_CHECKPOINT_EVERY = [float(ddp.CHECKPOINT_EVERY_S)]


def rig_trainer_class(base: type) -> type:
    """base (the task's Ultralytics trainer) as this rank trains it (rig.yolo.trainer)."""
    return yolo_trainer.trainer_class(base, _LaunchRank())


def _setup_ddp(trainer: Any) -> None:
    # Ultralytics' own sets TORCH_NCCL_BLOCKING_WAIT=1 and a 3-hour timeout (see rig.launch.ddp).
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")
    setup = ddp.ddp_setup(
        os.environ,
        str(trainer.args.device),
        int(os.environ.get("LOCAL_RANK", "0")),
        torch.cuda.is_available() and not trainer._on_cpu(),
    )
    if setup.device_index is not None:
        torch.cuda.set_device(setup.device_index)
        trainer.device = torch.device("cuda", setup.device_index)
        trainer.accelerator = torch.cuda
    # Without the blocking wait, torch's own async error handling (its default, 3: abort the
    # communicators and end the process without their clean-up) ends a job stuck on a lost rank.
    os.environ.pop("TORCH_NCCL_BLOCKING_WAIT", None)
    dist.init_process_group(
        backend=setup.backend,
        timeout=timedelta(seconds=setup.timeout_s),
        rank=_rank(),
        world_size=trainer.world_size,
    )
    if _rank() == 0:
        _logger.info(
            "process group: %s, %d ranks; a stuck collective fails the job after %d s (%s)",
            setup.backend,
            trainer.world_size,
            setup.timeout_s,
            ddp.NCCL_TIMEOUT_ENV,
        )


def _best_on_every_rank(trainer: Any) -> bool:
    """Whether every rank sees best.pt, agreed by all (global rank 0's file decides for it too).
    Ultralytics lets each rank look for itself: a rank on a node without the run directory skips
    the final validation its peers run, and they wait for it in a collective until the timeout."""
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")
    seen = torch.tensor([1 if trainer.best.exists() else 0], device=trainer.device)
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    return bool(seen.item())


def _use_sync_batchnorm(trainer: Any) -> None:
    trainer.model, layers = syncbn.to_sync_batchnorm(trainer.model)
    trainer.rig_sync_bn = True
    trainer.add_callback("on_pretrain_routine_end", _ema_with_plain_batchnorm)
    torch: Any = importlib.import_module("torch")
    compiled = syncbn.compile_warning(layers, getattr(trainer.args, "compile", False), torch.__version__)
    if compiled and _rank() == 0:
        _logger.warning("%s", compiled)
    if _rank() == 0:
        _logger.info(
            "sync_bn: %d BatchNorm layers synchronised over the %d ranks (two small collectives each, "
            "every step); checkpoints keep plain BatchNorm2d",
            layers,
            trainer.world_size,
        )


def _ema_with_plain_batchnorm(trainer: Any) -> None:
    """The EMA (a copy of the model, and what Ultralytics saves) back to BatchNorm2d once it exists."""
    if trainer.ema is not None:
        trainer.ema.ema, _ = syncbn.to_batchnorm(trainer.ema.ema)


def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    try:
        _CHECKPOINT_EVERY[0] = ddp.checkpoint_every(os.environ)
    except RigError as e:
        print(f"ERROR trainer: {e}", file=sys.stderr)
        return 2
    for sig in STOP_SIGNALS:
        signal.signal(sig, STOP.handler)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if (device := rankenv.cuda_device(os.environ)) is not None and _global_world_size() > 1:
        # The binder chose this rank's GPU (and gave it alone, CUDA_VISIBLE_DEVICES): Ultralytics and
        # rig.launch.ddp use that one device, never the node's list. The trainer counts the world
        # from WORLD_SIZE.
        args["device"] = str(device)
    model = ultra.yolo(args.pop("model", "yolo11n.pt"))
    if args.get("resume") is True and resumable.position(model.ckpt) is not None:
        # Ultralytics' resume=True refuses a checkpoint at epoch -1 (a stop in the first epoch) before
        # the trainer exists; the checkpoint's path, its other form, leaves the decision to the trainer.
        args["resume"] = model.ckpt_path
    rank = _rank()
    if rank == 0:
        telemetry.attach(model, rankenv.run_dir(os.environ))
    metrics.attach(model)  # this rank's series; served here when no launcher serves the node
    trainer_cls = rig_trainer_class(model.task_map[model.task]["trainer"])
    model.train(trainer=trainer_cls, **args)
    return _exit_code(model.trainer, rank)


def _exit_code(trainer: Any, rank: int) -> int:
    """128 + the signal on every rank of a run the ranks agreed to stop, whichever rank got it (a
    scheduler must not count a stopped job as done); 0 for a run that finished, even when a signal
    came after its last stop check (it is finished: there is nothing to resume)."""
    agreed = int(getattr(trainer, "rig_stop_signal", 0) or 0)
    if not agreed:
        if STOP.signum and rank == 0:
            _logger.info("signal %d came after the last epoch: the run finished", STOP.signum)
        return 0
    if rank == 0:
        last = getattr(trainer, "last", None)
        _logger.info(
            "stopped by signal %d; kept %s; %s",
            agreed,
            last,
            resume_hint(last, int(getattr(trainer, "epoch", 0)), int(getattr(trainer, "epochs", 0))),
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
