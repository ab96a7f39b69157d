"""What each rank runs: `python -m rig.launch.trainer key=value ...` -> YOLO(model).train(**args).

Under torchrun, Ultralytics takes its world size from `device` (the GPUs of this node); across
nodes that is wrong, so the trainer class is extended to use torchrun's global WORLD_SIZE (its
RANK already is global). SIGTERM only sets a flag; the ranks agree on it between batches and stop
the Ultralytics way, except that the partial epoch counts for nothing: no results.csv row, no best.pt,
and rank 0 saves `last.pt` as the end of the epoch before, so `resume=True` runs the interrupted epoch
again.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from rig import log, rankenv
from rig.launch import autoresume, checkpoints, cpuddp, ddp, syncbn
from rig.observe import metrics, telemetry
from rig.yolo import cached_dataset, device_augment

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
    typed = smart_value or importlib.import_module("ultralytics.cfg").smart_value
    args: dict[str, Any] = {}
    for item in argv:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"ERROR trainer: expected key=value, got {item!r}")
        args[key] = value if key in _STRING_KEYS else typed(value)
    return args


# Marks a checkpoint saved by a stop mid-epoch, in its train_metrics (the one free-form dict of a
# checkpoint that Ultralytics' resume does not validate).
_STOPPED_MID_EPOCH = autoresume.STOPPED_MID_EPOCH


def stopped_mid_epoch(ckpt: Mapping[str, Any] | None) -> bool:
    """Whether the checkpoint is a stop's: its `epoch` is the one before the interrupted epoch."""
    metrics = (ckpt or {}).get("train_metrics") or {}
    return bool(metrics.get(_STOPPED_MID_EPOCH))


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _global_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _stop_agreed(trainer: Any) -> int:
    """The stop signal every rank agrees on once any rank got one (the largest number, if several);
    0: none. Under DDP the ranks compare their signals every ddp.STOP_CHECK_EVERY batches (an
    all-reduce and a host sync), all on the same batches, so a rank that got none knows which."""
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")

    local = STOP.signum
    distributed = bool(dist.is_available() and dist.is_initialized())
    trainer.rig_batches = getattr(trainer, "rig_batches", 0) + 1
    if not ddp.stop_check_due(trainer.rig_batches, distributed):
        return 0
    if not distributed:
        return local
    flag = torch.tensor([local], device=trainer.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return int(flag.item())


def _on_batch_end(trainer: Any) -> None:
    agreed = 0 if trainer.stop else _stop_agreed(trainer)
    if agreed:
        trainer.stop = True
        trainer.rig_stopping = True
        trainer.rig_stop_signal = agreed
        _logger.info("stop requested: finishing this batch; resume=True runs this epoch again")


@contextlib.contextmanager
def _set_for_now(obj: object, **values: Any) -> Iterator[None]:
    kept = {name: getattr(obj, name) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(obj, name, value)


def rig_trainer_class(base: type) -> type:
    """base (the task's Ultralytics trainer) with rig's global world size and clean SIGTERM stop."""

    class RigTrainer(base):  # type: ignore[misc]
        rig_stopping = False
        rig_sync_bn = False  # the model's BatchNorm2d layers are SyncBatchNorm
        stopper: Any  # Ultralytics' EarlyStopping, from _setup_train on

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            world = _global_world_size()
            # Ultralytics counted only this node's `device` list, and 0 for the CPU (never DDP there);
            # rig's CPU ranks (device=cpu under torchrun) train DDP over gloo like GPU ranks.
            if world > 1 and (int(getattr(self, "world_size", 0)) >= 1 or self._on_cpu()):
                self.world_size = world
            self.add_callback("on_train_batch_end", _on_batch_end)

        def _on_cpu(self) -> bool:
            return str(getattr(self, "device", "")) == "cpu"

        def _cpu_ranks(self, fix: Callable[[], contextlib.AbstractContextManager[None]]) -> Any:
            """fix (a rig.launch.cpuddp correction) while Ultralytics' DDP path runs on CPU ranks."""
            return fix() if self._on_cpu() and self.world_size > 1 else contextlib.nullcontext()

        def _setup_ddp(self) -> None:
            # Ultralytics' own sets TORCH_NCCL_BLOCKING_WAIT=1 and a 3-hour timeout (see rig.launch.ddp).
            torch: Any = importlib.import_module("torch")
            dist: Any = importlib.import_module("torch.distributed")
            setup = ddp.ddp_setup(
                os.environ,
                str(self.args.device),
                int(os.environ.get("LOCAL_RANK", "0")),
                torch.cuda.is_available() and not self._on_cpu(),
            )
            if setup.device_index is not None:
                torch.cuda.set_device(setup.device_index)
                self.device = torch.device("cuda", setup.device_index)
                self.accelerator = torch.cuda
            # Without the blocking wait, torch's own async error handling (its default, 3: abort the
            # communicators and end the process without their clean-up) ends a job stuck on a lost rank.
            os.environ.pop("TORCH_NCCL_BLOCKING_WAIT", None)
            dist.init_process_group(
                backend=setup.backend,
                timeout=timedelta(seconds=setup.timeout_s),
                rank=_rank(),
                world_size=self.world_size,
            )
            if _rank() == 0:
                _logger.info(
                    "process group: %s, %d ranks; a stuck collective fails the job after %d s (%s)",
                    setup.backend,
                    self.world_size,
                    setup.timeout_s,
                    ddp.NCCL_TIMEOUT_ENV,
                )

        def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None) -> Any:
            # cache=ram: one decoded copy per node, mapped by every rank (rig.yolo.cached_dataset).
            # Training: colour and layout left to preprocess_batch, on the device (rig.yolo.device_augment).
            with cached_dataset.in_use(self.args), device_augment.in_use(mode):
                return super().build_dataset(img_path, mode, batch)

        def preprocess_batch(self, batch: dict[str, Any]) -> Any:
            return super().preprocess_batch(device_augment.finish(batch, self.device))

        def set_model_attributes(self) -> None:
            super().set_model_attributes()
            # Here: after the model is on its device, before compile and the DDP wrap.
            if syncbn.wanted(os.environ) and self.world_size > 1:
                _use_sync_batchnorm(self)

        def _model_train(self) -> None:
            super()._model_train()
            if self.rig_sync_bn:  # Ultralytics keeps frozen layers' BatchNorm2d in eval, not SyncBatchNorm
                syncbn.keep_frozen_in_eval(self.model, self.freeze_layer_names)

        def _load_checkpoint_state(self, ckpt: dict[str, Any]) -> None:
            super()._load_checkpoint_state(ckpt)
            if self.rig_sync_bn:  # resume and NaN recovery make a new EMA from the SyncBatchNorm model
                _ema_with_plain_batchnorm(self)

        def _setup_train(self) -> Any:
            # Ultralytics' AMP check loads yolo26n.pt and, when it is missing, tries to download it
            # before it looks at the offline flag: on a network that drops packets rank 0 stalls while
            # the others wait. Offline without the file, the check is skipped (AMP stays on).
            engine: Any = importlib.import_module("ultralytics.engine.trainer")
            with (
                _set_for_now(engine, check_amp=_offline_safe_amp_check(engine.check_amp)),
                self._cpu_ranks(cpuddp.setup_train),
            ):
                return super()._setup_train()

        def validate(self) -> Any:
            if self.rig_stopping:  # a SIGTERM grace period is too short for a validation pass
                # Nor is a partial epoch one for early stopping to judge: the loop calls the stopper
                # next, with the epoch's number and the fitness of the epoch before.
                if getattr(self, "stopper", None) is not None:
                    self.stopper = _FrozenStopper(self.stopper)
                return self.metrics, self.fitness
            with self._cpu_ranks(lambda: cpuddp.validation(self.validator)):
                return super().validate()

        def final_eval(self) -> Any:
            if self.rig_stopping:
                return None
            if self.world_size > 1 and not _best_on_every_rank(self):
                return _final_eval_skipped(self)
            with self._cpu_ranks(lambda: cpuddp.validation(self.validator)):
                return super().final_eval()

        def save_metrics(self, metrics: dict[str, Any]) -> None:
            if not self.rig_stopping:  # a partial epoch has no validation of its own to record
                super().save_metrics(metrics)

        def save_model(self) -> Any:
            with checkpoints.atomic_saves(self):  # a kill mid-save leaves the old file or the new one
                return self._rig_save_model()

        def _rig_save_model(self) -> Any:
            if not self.rig_stopping:
                return super().save_model()
            # Saved as the end of the epoch before (resume starts at epoch + 1), marked so that resume
            # can say so. A partial epoch is neither the best nor a save_period snapshot: best.pt is
            # pointed at last.pt for this one save, and save_period is off.
            marked = {**(self.metrics or {}), _STOPPED_MID_EPOCH: 1.0}
            with _set_for_now(self, epoch=self.epoch - 1, best=self.last, save_period=0, metrics=marked):
                return super().save_model()

        def resume_training(self, ckpt: dict[str, Any] | None) -> None:
            if ckpt is None or not self.resume or not stopped_mid_epoch(ckpt):
                super().resume_training(ckpt)
                return
            if ckpt.get("epoch") == -1:
                # Stopped in the first epoch: Ultralytics refuses epoch -1 as "finished". Loading the
                # optimizer, EMA and best fitness is all its resume adds to a fresh start at epoch 0.
                self._load_checkpoint_state(ckpt)
                self.start_epoch = 0
            else:
                super().resume_training(ckpt)
            if _rank() == 0:
                _logger.info(
                    "%s was saved by a stop mid-epoch: running epoch %d/%d again",
                    self.args.model,
                    self.start_epoch + 1,
                    self.epochs,
                )

    return RigTrainer


def _best_on_every_rank(trainer: Any) -> bool:
    """Whether every rank sees best.pt, agreed by all (global rank 0's file decides for it too).
    Ultralytics lets each rank look for itself: a rank on a node without the run directory skips
    the final validation its peers run, and they wait for it in a collective until the timeout."""
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")
    seen = torch.tensor([1 if trainer.best.exists() else 0], device=trainer.device)
    dist.all_reduce(seen, op=dist.ReduceOp.MIN)
    return bool(seen.item())


def _final_eval_skipped(trainer: Any) -> None:
    """Ultralytics' end of training without the final validation: rank 0 strips the checkpoints."""
    if _rank() != 0:
        return
    strip: Any = importlib.import_module("ultralytics.utils.torch_utils").strip_optimizer
    ckpt = strip(trainer.last) if trainer.last.exists() else {}
    if trainer.best.exists():
        strip(trainer.best, updates={"train_results": ckpt.get("train_results")})
        _logger.warning(
            "final validation skipped: %s is not visible to the ranks of every node (put the run "
            "directory on storage every node shares); validate it with `yolo val model=%s`",
            trainer.best,
            trainer.best,
        )


class _FrozenStopper:
    """Ultralytics' EarlyStopping as it was before a stop: calling it changes nothing, stops nothing,
    so the checkpoint keeps the best epoch and fitness of whole epochs."""

    def __init__(self, stopper: Any) -> None:
        self.rig_stopper = getattr(stopper, "rig_stopper", stopper)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rig_stopper, name)

    def __call__(self, _epoch: int, _fitness: Any) -> bool:
        return False


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


def _offline_safe_amp_check(check_amp: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(model: Any) -> bool:
        utils: Any = importlib.import_module("ultralytics.utils")
        weights = Path(utils.SETTINGS["weights_dir"]) / "yolo26n.pt"
        params = getattr(model, "parameters", None)
        on_cpu = params is not None and next(params()).device.type == "cpu"  # Ultralytics' check: no AMP
        if not utils.ONLINE and not weights.is_file() and not on_cpu:
            _logger.info(
                "AMP check skipped: offline and no %s to check with (`make weights W=yolo26n.pt` adds it); "
                "AMP stays on",
                weights,
            )
            return True
        return check_amp(model)

    return check


def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    for sig in STOP_SIGNALS:
        signal.signal(sig, STOP.handler)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if (device := rankenv.cuda_device(os.environ)) is not None and _global_world_size() > 1:
        # The binder chose this rank's GPU (and gave it alone, CUDA_VISIBLE_DEVICES): Ultralytics and
        # rig.launch.ddp use that one device, never the node's list. The trainer counts the world
        # from WORLD_SIZE.
        args["device"] = str(device)
    yolo: Any = importlib.import_module("ultralytics").YOLO
    model = yolo(args.pop("model", "yolo11n.pt"))
    if args.get("resume") is True and stopped_mid_epoch(model.ckpt):
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
        _logger.info("stopped by signal %d; kept %s; continue with: resume=True model=%s", agreed, last, last)
    return 128 + agreed


if __name__ == "__main__":
    sys.exit(main())
