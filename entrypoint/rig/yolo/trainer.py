"""rig's subclass of the task's Ultralytics trainer: what it changes in Ultralytics' training loop.

Ultralytics counts the world from this node's `device` list; the subclass takes the global world
size. A stop the ranks agreed on ends the run the Ultralytics way, except that the partial epoch
counts for nothing: no validation, no results.csv row, no best.pt, and `last.pt` is saved as the end
of the epoch before (marked STOPPED_MID_EPOCH), so `resume=True` runs the interrupted epoch again.
The datasets are rig's (the node image cache, the augmentation's pixel work on the device).

What belongs to the rank rather than to Ultralytics (signals, the process group, collectives, CPU
ranks' corrections, SyncBatchNorm, atomic saves) is the `Rank` the class is made with:
rig.launch.trainer gives it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from rig import log
from rig.yolo import device_augment, ultra
from rig.yolo.nodecache import cached_dataset

_logger = log.get("trainer")

# Marks a checkpoint saved by a stop mid-epoch, in its train_metrics (the one free-form dict of a
# checkpoint that Ultralytics' resume does not validate).
STOPPED_MID_EPOCH = "rig/stopped_mid_epoch"


class Rank(Protocol):
    """The rank's side of training, called from inside Ultralytics' trainer."""

    def world_size(self) -> int: ...
    def is_first(self) -> bool: ...  # global rank 0
    def on_batch_end(self, trainer: Any) -> None: ...  # sets trainer.stop when the ranks agree to stop
    def setup_ddp(self, trainer: Any) -> None: ...  # the process group
    def best_on_every_rank(self, trainer: Any) -> bool: ...
    def cpu_setup_train(self) -> contextlib.AbstractContextManager[None]: ...
    def cpu_validation(self, validator: Any) -> contextlib.AbstractContextManager[None]: ...
    def sync_bn_wanted(self) -> bool: ...
    def use_sync_batchnorm(self, trainer: Any) -> None: ...  # sets trainer.rig_sync_bn
    def keep_frozen_in_eval(self, trainer: Any) -> None: ...
    def ema_with_plain_batchnorm(self, trainer: Any) -> None: ...
    def atomic_saves(self, trainer: Any) -> contextlib.AbstractContextManager[None]: ...


def stopped_mid_epoch(ckpt: Mapping[str, Any] | None) -> bool:
    """Whether the checkpoint is a stop's: its `epoch` is the one before the interrupted epoch."""
    metrics = (ckpt or {}).get("train_metrics") or {}
    return bool(metrics.get(STOPPED_MID_EPOCH))


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


def trainer_class(base: type, rank: Rank) -> type:
    """base (the task's Ultralytics trainer) with rig's global world size and clean stop."""

    class RigTrainer(base):  # type: ignore[misc]
        rig_stopping = False
        rig_sync_bn = False  # the model's BatchNorm2d layers are SyncBatchNorm
        stopper: Any  # Ultralytics' EarlyStopping, from _setup_train on

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            world = rank.world_size()
            # Ultralytics counted only this node's `device` list, and 0 for the CPU (never DDP there);
            # rig's CPU ranks (device=cpu under torchrun) train DDP over gloo like GPU ranks.
            if world > 1 and (int(getattr(self, "world_size", 0)) >= 1 or self._on_cpu()):
                self.world_size = world
            self.add_callback("on_train_batch_end", rank.on_batch_end)

        def _on_cpu(self) -> bool:
            return str(getattr(self, "device", "")) == "cpu"

        def _cpu_ranks(self, fix: Callable[[], contextlib.AbstractContextManager[None]]) -> Any:
            """fix (a correction for CPU ranks) while Ultralytics' DDP path runs on CPU ranks."""
            return fix() if self._on_cpu() and self.world_size > 1 else contextlib.nullcontext()

        def _setup_ddp(self) -> None:
            rank.setup_ddp(self)

        def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None) -> Any:
            # cache=ram: one decoded copy per node, mapped by every rank (rig.yolo.nodecache.cached_dataset).
            # Training: the augmentation's pixels left to preprocess_batch, on the device
            # (rig.yolo.device_augment).
            with cached_dataset.in_use(self.args), device_augment.in_use(mode):
                return super().build_dataset(img_path, mode, batch)

        def preprocess_batch(self, batch: dict[str, Any]) -> Any:
            return super().preprocess_batch(device_augment.finish(batch, self.device))

        def set_model_attributes(self) -> None:
            super().set_model_attributes()
            # Here: after the model is on its device, before compile and the DDP wrap.
            if rank.sync_bn_wanted() and self.world_size > 1:
                rank.use_sync_batchnorm(self)

        def _model_train(self) -> None:
            super()._model_train()
            if self.rig_sync_bn:  # Ultralytics keeps frozen layers' BatchNorm2d in eval, not SyncBatchNorm
                rank.keep_frozen_in_eval(self)

        def _load_checkpoint_state(self, ckpt: dict[str, Any]) -> None:
            super()._load_checkpoint_state(ckpt)
            if self.rig_sync_bn:  # resume and NaN recovery make a new EMA from the SyncBatchNorm model
                rank.ema_with_plain_batchnorm(self)

        def _setup_train(self) -> Any:
            # Ultralytics' AMP check loads yolo26n.pt and, when it is missing, tries to download it
            # before it looks at the offline flag: on a network that drops packets rank 0 stalls while
            # the others wait. Offline without the file, the check is skipped (AMP stays on).
            engine: Any = ultra.trainer_engine()
            with (
                _set_for_now(engine, check_amp=offline_safe_amp_check(engine.check_amp)),
                self._cpu_ranks(rank.cpu_setup_train),
            ):
                return super()._setup_train()

        def validate(self) -> Any:
            if self.rig_stopping:  # a SIGTERM grace period is too short for a validation pass
                # Nor is a partial epoch one for early stopping to judge: the loop calls the stopper
                # next, with the epoch's number and the fitness of the epoch before.
                if getattr(self, "stopper", None) is not None:
                    self.stopper = _FrozenStopper(self.stopper)
                return self.metrics, self.fitness
            with self._cpu_ranks(lambda: rank.cpu_validation(self.validator)):
                return super().validate()

        def final_eval(self) -> Any:
            if self.rig_stopping:
                return None
            if self.world_size > 1 and not rank.best_on_every_rank(self):
                return _final_eval_skipped(self, rank.is_first())
            with self._cpu_ranks(lambda: rank.cpu_validation(self.validator)):
                return super().final_eval()

        def save_metrics(self, metrics: dict[str, Any]) -> None:
            if not self.rig_stopping:  # a partial epoch has no validation of its own to record
                super().save_metrics(metrics)

        def save_model(self) -> Any:
            with rank.atomic_saves(self):  # a kill mid-save leaves the old file or the new one
                return self._rig_save_model()

        def _rig_save_model(self) -> Any:
            if not self.rig_stopping:
                return super().save_model()
            # Saved as the end of the epoch before (resume starts at epoch + 1), marked so that resume
            # can say so. A partial epoch is neither the best nor a save_period snapshot: best.pt is
            # pointed at last.pt for this one save, and save_period is off.
            marked = {**(self.metrics or {}), STOPPED_MID_EPOCH: 1.0}
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
            if rank.is_first():
                _logger.info(
                    "%s was saved by a stop mid-epoch: running epoch %d/%d again",
                    self.args.model,
                    self.start_epoch + 1,
                    self.epochs,
                )

    return RigTrainer


def _final_eval_skipped(trainer: Any, first: bool) -> None:
    """Ultralytics' end of training without the final validation: rank 0 strips the checkpoints."""
    if not first:
        return
    ckpt = ultra.strip_optimizer(trainer.last) if trainer.last.exists() else {}
    if trainer.best.exists():
        ultra.strip_optimizer(trainer.best, updates={"train_results": ckpt.get("train_results")})
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


def offline_safe_amp_check(check_amp: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def check(model: Any) -> bool:
        weights: Path = ultra.settings_dirs()["weights_dir"] / "yolo26n.pt"
        params = getattr(model, "parameters", None)
        on_cpu = params is not None and next(params()).device.type == "cpu"  # Ultralytics' check: no AMP
        if not ultra.online() and not weights.is_file() and not on_cpu:
            _logger.info(
                "AMP check skipped: offline and no %s to check with (`make weights W=yolo26n.pt` adds it); "
                "AMP stays on",
                weights,
            )
            return True
        return check_amp(model)

    return check
