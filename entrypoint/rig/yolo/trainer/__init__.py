# mypy: disable-error-code="safe-super"
# (RigTrainer's base is contract.Trainer, a Protocol, for the type check only: its super() calls
# reach Ultralytics' trainer at run time, never the Protocol's empty bodies.)
"""rig's trainer: what it changes in Ultralytics' training loop, as a class that extends the task's.

- The world: Ultralytics counts it from this node's `device` list; RigTrainer takes the global
  world size. CPU ranks keep their loader workers (Ultralytics sets `workers=0` on the CPU).
- Stops lose nothing. The ranks agree on a stop signal between batches (the `Rank`); rank 0 then
  writes a checkpoint at that batch boundary and the run ends there, without validating or scoring
  the partial epoch. A stop during validation ends it and saves the epoch as trained, its
  validation still to run. Every RIG_CHECKPOINT_EVERY seconds rank 0 writes the same kind of
  checkpoint at a batch boundary, so a SIGKILL loses at most that long; one that cannot be written
  (a full disk, or anything else) is a WARNING, the previous one stays and training goes on.
- Checkpoints are Ultralytics' own (its save_model writes them) with rig's keys added
  (rig.yolo.trainer.saves): a failure in rig's part keeps Ultralytics' checkpoint.
- Resume continues exactly there (rig.yolo.resumable: what rig's keys hold, fp32; rig.yolo.draws:
  the random draws; rig.yolo.trainloader: the loader starting at a batch). The loop is Ultralytics'
  own: its batch index starts at the resumed batch (its `enumerate`, for the train loader), its
  accumulation counts from the step before the stop (`accumulate` reads past it until the first
  step), and the running loss and accumulated gradients come back at the first resumed batch, on
  the training device. A resume into another geometry restarts the accumulation.

RigTrainer is a mixin: `for_task` puts it in front of the task's Ultralytics trainer (DetectionTrainer,
SegmentationTrainer...), so its `super()` calls are Ultralytics'. It only wires Ultralytics' hooks to
the parts, each one job and tested alone: `loaders` (the train loader's numbering), `accumulation`
(the optimizer's step), `stops` (the agreed stop), `validation` (a stoppable pass), `saves`
(checkpoints), `resume` (what a resume puts back). What belongs to the rank rather than to
Ultralytics (signals, the process group, collectives, CPU ranks' corrections, SyncBatchNorm, atomic
writes) is the `Rank` the class is made with: rig.launch.rankside gives it. The features the
installed Ultralytics lacks names for are off (`Rank.feature_on`, rig.yolo.contractcheck).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from rig import log
from rig.errors import RigError
from rig.yolo import augment, contract, draws, optkernels, resumable, trainloader, ultra
from rig.yolo.trainer import accumulation, loaders, resume, saves, stops, validation
from rig.yolo.trainer.validation import ValidationStopped

_logger = log.get("trainer")


class Rank(Protocol):
    """The rank's side of training, called from inside Ultralytics' trainer."""

    def world_size(self) -> int: ...
    def index(self) -> int: ...  # the global rank
    def is_first(self) -> bool: ...  # global rank 0
    def feature_on(self, feature: contract.Feature) -> bool: ...  # its Ultralytics names checked out
    def named(self, loaded: str) -> str: ...  # a resumed checkpoint (the ranks' copy) as the user named it
    def agreed_stop(
        self, trainer: contract.Trainer
    ) -> int: ...  # after each training batch: the signal, or 0
    # During a validation pass, after `done` of its batches; `common`: the fewest any rank has.
    def agreed_stop_in_validation(self, trainer: contract.Trainer, done: int, common: int) -> int: ...
    def fewest(self, trainer: contract.Trainer, count: int) -> int: ...  # the smallest count over the ranks
    def checkpoint_every(self) -> float: ...  # seconds; 0: no checkpoints inside an epoch
    def setup_ddp(self, trainer: contract.Trainer) -> None: ...  # the process group
    def best_on_every_rank(self, trainer: contract.Trainer) -> bool: ...
    def cpu_setup_train(self) -> contextlib.AbstractContextManager[None]: ...
    def cpu_validation(self, validator: contract.Validator) -> contextlib.AbstractContextManager[None]: ...
    def sync_bn_wanted(self) -> bool: ...
    def fused_optimizer_wanted(self) -> bool: ...  # rig.launch.steplevers' fused optimizer lever
    def use_sync_batchnorm(self, trainer: RigTrainer) -> None: ...  # sets trainer.rig_sync_bn
    def keep_frozen_in_eval(self, trainer: contract.Trainer) -> None: ...
    def ema_with_plain_batchnorm(self, trainer: contract.Trainer) -> None: ...
    def write(self, path: Path, data: saves.Data) -> None: ...  # atomically, the run's file mode
    def atomic_strip(self, strip: Callable[..., Any], drop: Sequence[str]) -> Callable[..., Any]: ...


if TYPE_CHECKING:
    _Base = contract.Trainer
else:
    _Base = object


def for_task(base: type, rank: Rank) -> type[RigTrainer]:
    """The class Ultralytics instantiates: RigTrainer in front of the task's trainer `base`."""
    made = type(f"Rig{base.__name__}", (RigTrainer, base), {"rig_rank": rank})
    return cast("type[RigTrainer]", made)


class RigTrainer(_Base):
    """rig's world size, stops, checkpoints and resume in front of a task's Ultralytics trainer."""

    rig_rank: ClassVar[Rank]
    rig_sync_bn = False  # the model's BatchNorm2d layers are SyncBatchNorm
    rig_requested_workers: Any = None
    rig_pending: resumable.Pending | None = None  # what the first resumed batch puts back

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Before Ultralytics' __init__, which sets `accumulate`.
        rank = self.rig_rank
        self.rig_steps = accumulation.Accumulation()
        self.rig_stop = stops.Stop()
        self.rig_numbering = loaders.Batches(finished=lambda: self._rig_put_back(trained=True))
        self.rig_exact = rank.feature_on(contract.EXACT_RESUME)
        self.rig_saves = saves.Cadence(rank.checkpoint_every if self.rig_exact else lambda: 0.0)
        self.rig_writes = saves.Writes(rank.write)
        super().__init__(*args, **kwargs)
        world = rank.world_size()
        # Ultralytics counted only this node's `device` list, and 0 for the CPU (never DDP there);
        # rig's CPU ranks (device=cpu under torchrun) train DDP over gloo like GPU ranks.
        if world > 1 and (int(self.world_size) >= 1 or self._on_cpu()):
            self.world_size: int = world
        # Ultralytics loads on the CPU in the main process ("faster CPU training"); CPU ranks load
        # with workers like GPU ranks, so their stops and resumes are the real ones. workers=0 asks.
        requested = self.rig_requested_workers
        if self._on_cpu() and requested and self.args.workers == 0:
            self.args.workers = requested
        # Ultralytics' save_model writes through these paths: atomically, with rig's keys (saves).
        paths = saves.path_type(self.rig_writes)
        self.wdir: Path = paths(self.wdir)
        self.last: Path = paths(self.last)
        self.best: Path = paths(self.best)
        for event, callback in (
            ("on_train_start", RigTrainer._rig_train_start),
            ("on_train_epoch_start", RigTrainer._rig_epoch_start),
            ("on_train_batch_start", RigTrainer._rig_batch_start),
            ("on_train_batch_end", RigTrainer._rig_batch_end),
        ):
            self.add_callback(event, callback)

    def check_resume(self, overrides: Any) -> None:
        super().check_resume(overrides)
        self.rig_requested_workers = self.args.workers

    def _on_cpu(self) -> bool:
        return str(self.device) == "cpu"

    def _cpu_ranks(self, fix: Callable[[], contextlib.AbstractContextManager[None]]) -> Any:
        """fix (a correction for CPU ranks) while Ultralytics' DDP path runs on CPU ranks."""
        return fix() if self._on_cpu() and self.world_size > 1 else contextlib.nullcontext()

    def _setup_ddp(self) -> None:
        self.rig_rank.setup_ddp(self)

    # ---- datasets and loaders --------------------------------------------------------------------
    def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None) -> Any:
        # rig's dataset wrappers, in their order (rig.yolo.augment.building): the node image cache,
        # the augmentation's pixels left to preprocess_batch, each sample's draws seeded from its
        # epoch and index, the file screen.
        guards = self.rig_rank.feature_on(contract.DATA_GUARDS)
        with augment.building(self.args, mode, exact=self.rig_exact, guards=guards):
            return super().build_dataset(img_path, mode, batch)

    def get_dataloader(
        self, dataset_path: str, batch_size: int = 16, rank: int = 0, mode: str = "train"
    ) -> Any:
        # Workers that outlive a stop signal; epochs that start mid-way, in the order the seed gives.
        if not self.rig_exact:
            return super().get_dataloader(dataset_path, batch_size, rank, mode)
        with trainloader.in_use(int(self.args.seed)):
            return super().get_dataloader(dataset_path, batch_size, rank, mode)

    def preprocess_batch(self, batch: dict[str, Any]) -> Any:
        return super().preprocess_batch(augment.finish(batch, self.device))

    # ---- model --------------------------------------------------------------------------------------
    def set_model_attributes(self) -> None:
        super().set_model_attributes()
        # Here: after the model is on its device, before compile and the DDP wrap.
        if self.rig_rank.sync_bn_wanted() and self.world_size > 1:
            self.rig_rank.use_sync_batchnorm(self)

    def build_optimizer(
        self,
        model: Any,
        name: str = "auto",
        lr: float = 0.001,
        momentum: float = 0.9,
        decay: float = 1e-5,
        iterations: float = 1e5,
    ) -> Any:
        optimizer = super().build_optimizer(model, name, lr, momentum, decay, iterations)
        if not self.rig_rank.fused_optimizer_wanted():
            return optimizer
        optimizer, done = optkernels.with_fast_kernels(optimizer)
        if self.rig_rank.is_first():
            _logger.info("fused_optimizer: %s", done)
        return optimizer

    def _model_train(self) -> None:
        super()._model_train()
        if self.rig_sync_bn:  # Ultralytics keeps frozen layers' BatchNorm2d in eval, not SyncBatchNorm
            self.rig_rank.keep_frozen_in_eval(self)

    def _load_checkpoint_state(self, ckpt: contract.Checkpoint) -> None:
        super()._load_checkpoint_state(ckpt)
        if self.rig_sync_bn:  # resume and NaN recovery make a new EMA from the SyncBatchNorm model
            self.rig_rank.ema_with_plain_batchnorm(self)

    def _setup_train(self) -> Any:
        # Ultralytics' AMP check loads yolo26n.pt and, when it is missing, tries to download it
        # before it looks at the offline flag: on a network that drops packets rank 0 stalls while
        # the others wait. Offline without the file, the check is skipped (AMP stays on).
        with contextlib.ExitStack() as fixes:
            if self.rig_rank.feature_on(contract.OFFLINE):
                engine = ultra.engine_trainer()
                fixes.enter_context(
                    ultra.swapped(
                        contract.EngineTrainer, engine, check_amp=offline_safe_amp_check(engine.check_amp)
                    )
                )
            fixes.enter_context(self._cpu_ranks(self.rig_rank.cpu_setup_train))
            return super()._setup_train()

    # ---- the loop -----------------------------------------------------------------------------------
    @property
    def rig_batch(self) -> int:  # the index of the batch under way in its epoch
        return self.rig_numbering.current

    @rig_batch.setter
    def rig_batch(self, value: int) -> None:
        self.rig_numbering.current = value

    @property
    def rig_stopping(self) -> bool:  # the ranks agreed to stop: the run ends at this batch boundary
        return self.rig_stop.stopping

    @rig_stopping.setter
    def rig_stopping(self, value: bool) -> None:
        self.rig_stop.stopping = value

    @property
    def rig_stop_signal(self) -> int:  # rig.launch.trainer's exit code
        return self.rig_stop.signal

    def _do_train(self) -> Any:
        self.rig_saves.started()
        if not self.rig_exact:
            return super()._do_train()
        numbered = loaders.enumerate_for(lambda: self.train_loader, self.rig_numbering)
        with ultra.swapped(contract.EngineTrainer, ultra.engine_trainer(), enumerate=numbered):
            return super()._do_train()

    @property
    def accumulate(self) -> int:  # Ultralytics': batches per optimizer step
        return self.rig_steps.accumulate

    @accumulate.setter
    def accumulate(self, value: int) -> None:
        self.rig_steps.nominal = value

    def optimizer_step(self) -> None:
        super().optimizer_step()
        self.rig_steps.stepped(accumulation.iteration(self.epoch, self.rig_batch, len(self.train_loader)))

    def _rig_train_start(self) -> None:
        _logger.info(
            "rank %d: %d loader workers for training, %d for validation",
            self.rig_rank.index(),
            int(self.train_loader.num_workers),
            int(self.test_loader.num_workers),
        )

    def _rig_epoch_start(self) -> None:
        if self.rig_pending is not None:
            self.rig_pending, warning = resume.fitted(self.rig_pending, len(self.train_loader))
            if warning and self.rig_rank.is_first():
                shown = self.rig_rank.named(str(self.args.model))
                _logger.warning("%s %s (epoch %d)", shown, warning, self.epoch + 1)
        done = self.rig_pending.done if self.rig_pending is not None else 0
        self.rig_numbering.offset = done
        if isinstance(self.train_loader, trainloader.RigLoader):
            self.train_loader.begin_epoch(self.epoch, done)

    def _rig_batch_start(self) -> None:
        if self.rig_exact:
            draws.seed_batch(int(self.args.seed), self.rig_rank.index(), self.epoch, self.rig_batch)
        self._rig_put_back()

    def _rig_put_back(self, trained: bool = False) -> None:
        pending, self.rig_pending = self.rig_pending, None
        if pending is None:
            return
        device = self.device
        if trained:  # the epoch's start set its own rate; no batch set the warmup's since
            for group, lr in zip(self.optimizer.param_groups, pending.lr, strict=False):
                group["lr"] = lr
        self.tloss = resume.on_device(pending.tloss, device)
        if not self.loss_names and pending.loss_names:  # no batch yet in this process
            self.loss_names: tuple[str, ...] = pending.loss_names
            self.loss_items = resume.on_device(pending.loss_items, device)
            self.loss = resume.on_device(pending.loss, device)
            if self.rig_rank.is_first() and self.metrics is not None:
                self.metrics.update(dict.fromkeys(self.label_loss_items(prefix="val"), 0.0))
        if pending.gradients:
            now = resumable.scale_of(self.scaler)
            saved = now if pending.grad_scale is None else pending.grad_scale
            resumable.put_gradients(self, resume.gradients_scaled(pending.gradients, saved, now))
        self.rig_steps.resumed(pending.last_opt_step)

    def _rig_batch_end(self) -> None:
        if self.stop:
            return
        done = self.rig_batch + 1
        signum = self.rig_rank.agreed_stop(self)
        if signum:
            self._rig_stop(signum, done)
        elif self.rig_rank.is_first() and self.rig_saves.due():
            write = functools.partial(self._rig_checkpoint, self.epoch, done, "checkpoint")
            if not saves.periodic(write, self.last):
                self.rig_saves.saved()  # the next try comes a period later, not at the next batch

    def _rig_stop(self, signum: int, done: int) -> None:
        self.stop = True
        self.rig_stop.agreed(signum)
        # A partial epoch is not one for early stopping to judge: the loop calls the stopper next.
        self.stopper: contract.Stopper = stops.FrozenStopper(self.stopper)
        if self.rig_rank.is_first():
            if self.rig_exact:
                _logger.info("stop requested (signal %d): saving at this batch boundary", signum)
                self._rig_checkpoint(self.epoch, done, "stop")
            else:
                _logger.info("stop requested (signal %d): %s keeps the last epoch's end", signum, self.last)
        self.rig_stop.saved = True

    def _rig_checkpoint(self, epoch: int, done: int, why: str) -> None:
        """Rank 0: last.pt, to continue at batch `done` of `epoch`: Ultralytics' save_model, written
        to last.pt alone, with rig's keys."""
        started = time.monotonic()
        tloss = self.tloss if done else None
        state = functools.partial(resumable.state, self, epoch, done, self.rig_steps.last_step, tloss)
        with self.rig_writes.extending(resumable.stock_epoch(epoch), state, only=self.last):
            super().save_model()
        took = self.rig_saves.saved() - started
        where = resumable.Position(epoch, done, len(self.train_loader)).describe(self.epochs)
        _logger.info("%s: %s continues at %s (%.1f s)", why, self.last, where, took)

    # ---- validation, saves, the end ---------------------------------------------------------------
    def validate(self) -> Any:
        if self.rig_stopping:  # the run stops at this batch boundary: the epoch is not finished
            return self.metrics, self.fitness
        try:
            with self._cpu_ranks(lambda: self.rig_rank.cpu_validation(self.validator)), self._rig_stoppable():
                return super().validate()
        except ValidationStopped as stopped:
            # The epoch is trained; its validation runs first when the run is resumed.
            self._rig_stop(stopped.signum, len(self.train_loader))
            return self.metrics, self.fitness

    def _rig_stoppable(self) -> contextlib.AbstractContextManager[None]:
        return validation.stoppable(
            self.validator,
            fewest=lambda count: self.rig_rank.fewest(self, count),
            agreed=lambda done, common: self.rig_rank.agreed_stop_in_validation(self, done, common),
        )

    def final_eval(self) -> Any:
        if self.rig_stopping:
            return None
        engine = ultra.engine_trainer()
        strip = self.rig_rank.atomic_strip(engine.strip_optimizer, [resumable.RESUME_KEY])
        with ultra.swapped(contract.EngineTrainer, engine, strip_optimizer=strip):
            if self.world_size > 1 and not self.rig_rank.best_on_every_rank(self):
                return _final_eval_skipped(self, self.rig_rank.is_first(), strip)
            try:
                with (
                    self._cpu_ranks(lambda: self.rig_rank.cpu_validation(self.validator)),
                    self._rig_stoppable(),
                ):
                    return super().final_eval()
            except ValidationStopped as stopped:
                if self.rig_rank.is_first():
                    _logger.info(
                        "signal %d during the final validation: ended it; the run is finished (%s)",
                        stopped.signum,
                        self.best,
                    )
                return None

    def save_metrics(self, metrics: dict[str, Any]) -> None:
        if not self.rig_stopping:  # a partial epoch has no validation of its own to record
            super().save_metrics(metrics)

    def save_model(self) -> Any:
        if self.rig_stopping:  # written at the stop's batch boundary
            return self.rig_stop.saved
        if not self.rig_exact:
            return super().save_model()
        # The epoch's end: continue at the next epoch's first batch.
        started = time.monotonic()
        state = functools.partial(resumable.state, self, self.epoch + 1, 0, self.rig_steps.last_step, None)
        with self.rig_writes.extending(resumable.stock_epoch(self.epoch + 1), state):
            saved = super().save_model()
        _logger.debug("epoch %d saved in %.1f s", self.epoch + 1, self.rig_saves.saved() - started)
        return saved

    def resume_training(self, ckpt: contract.Checkpoint | None) -> None:
        where = resumable.position(ckpt) if ckpt is not None and self.resume and self.rig_exact else None
        if ckpt is None or where is None:
            super().resume_training(ckpt)
            return
        if where.epoch >= self.epochs:
            super().resume_training(ckpt)  # Ultralytics' "finished, nothing to resume"
            return
        if where.epoch == 0:
            # Ultralytics' resume starts at its `epoch` key + 1, never at epoch 0 (the key says 0
            # inside the first epoch, for stock Ultralytics). Loading the optimizer, EMA and best
            # fitness is all its resume adds to a fresh start at epoch 0.
            self._load_checkpoint_state(ckpt)
        else:
            super().resume_training(ckpt)
        self.start_epoch = where.epoch  # rig's position, not Ultralytics' key
        try:
            self.rig_pending = resumable.restore(self, ckpt)
        except (KeyError, RuntimeError, ValueError, TypeError) as e:  # another model, another release's
            first = (str(e).strip().splitlines() or [""])[0]
            named = self.rig_rank.named(str(self.args.model))
            raise RigError(
                f"{named}: rig's resume state does not fit this model ({type(e).__name__}: "
                f"{first}); resume with the model and Ultralytics release that wrote it, or start a new run",
                2,
            ) from None
        if self.rig_rank.is_first():
            _logger.info(
                "resuming %s: %s", self.rig_rank.named(str(self.args.model)), where.describe(self.epochs)
            )


def _final_eval_skipped(trainer: contract.Trainer, first: bool, strip: Callable[..., Any]) -> None:
    """Ultralytics' end of training without the final validation: rank 0 strips the checkpoints."""
    if not first:
        return
    ckpt = strip(trainer.last) if trainer.last.exists() else {}
    if trainer.best.exists():
        strip(trainer.best, updates={"train_results": ckpt.get("train_results")})
        _logger.warning(
            "final validation skipped: %s is not visible to the ranks of every node (put the run "
            "directory on storage every node shares); validate it with `yolo val model=%s`",
            trainer.best,
            trainer.best,
        )


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
