"""What each rank publishes: Ultralytics callbacks into prometheus-client's multiprocess values.

Every rank counts its own images, batch times and loader waits (labelled `rank`, the global one);
rank 0 alone publishes the run's progress, losses, learning rates, validation and checkpoint time.
A batch's time runs from the previous batch's end (or the epoch's start) to its own end; its loader
wait is the part before `on_train_batch_start`, inside the loader's `next()` (as rig.observe.
telemetry and `rig bench` measure it).
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log, rankenv, versions
from rig.instrument.metrics import config
from rig.instrument.metrics.node import serve_node
from rig.yolo import contract, ultra

LOG = log.get("metrics")

# Batch times from a small model on a fast GPU to a large one on a CPU.
BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LOSS_EVERY_S = 1.0  # losses are tensors: read them at most this often (each read syncs the device)
# Ultralytics' validation keys (detect, segment, pose and obb boxes) -> our names.
VAL_KEYS = {
    "metrics/mAP50(B)": "map50",
    "metrics/mAP50-95(B)": "map50_95",
    "metrics/precision(B)": "precision",
    "metrics/recall(B)": "recall",
}


@dataclass(frozen=True)
class Progress:
    ratio: float
    eta_s: float | None


def progress(
    epoch: int, batches_done: int, batches: int, epochs: int, start_epoch: int, elapsed_s: float
) -> Progress:
    """How far the run is (0-1) and the seconds left at the pace of this session (a resumed run's
    earlier epochs do not count toward its pace). epoch is 0-based; batches_done of this epoch."""
    if epochs <= 0:
        return Progress(0.0, None)
    done = epoch + (batches_done / batches if batches > 0 else 0.0)
    ratio = min(max(done / epochs, 0.0), 1.0)
    session = done - start_epoch
    if session <= 0 or elapsed_s <= 0:
        return Progress(ratio, None)
    return Progress(ratio, max(elapsed_s / session * (epochs - done), 0.0))


def images_in_batch(batch_size: int, epoch_images: int | None, seen: int) -> int:
    """A batch's images: the loader's batch size, except the last one of the epoch's shard."""
    if epoch_images is None:
        return batch_size
    return max(0, min(batch_size, epoch_images - seen))


def _name(value: Any) -> str:
    return Path(str(value)).name if value else ""


class Series:
    """The metric objects, created once per process (prometheus-client writes each to its own file)."""

    def __init__(self) -> None:
        p: Any = importlib.import_module("prometheus_client")

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
            # One process writes each of these (rank 0): the latest value is the value.
            return p.Gauge(name, doc, labels, registry=None, multiprocess_mode="mostrecent")

        self.info = gauge(
            "yolo_train_info",
            "The run: 1, its names in the labels.",
            ("run", "model", "data", "stack", "ultralytics_version", "world_size"),
        )
        self.epoch = gauge("yolo_train_epoch", "The epoch in progress, from 1.")
        self.epochs = gauge("yolo_train_epochs", "The epochs the run trains.")
        self.progress = gauge("yolo_train_progress_ratio", "The share of the run's batches done, 0-1.")
        self.eta = gauge("yolo_train_eta_seconds", "Seconds left at this session's pace.")
        self.loss = gauge("yolo_train_loss", "The epoch's mean loss so far, by component.", ("component",))
        self.lr = gauge("yolo_train_learning_rate", "The optimizer's learning rate.", ("param_group",))
        self.val = {
            key: gauge(f"yolo_val_{key}", f"Validation {key} of the last validated epoch, 0-1.")
            for key in ("map50", "map50_95", "precision", "recall")
        }
        self.checkpoint = gauge(
            "yolo_train_last_checkpoint_timestamp_seconds", "When the last checkpoint was saved (Unix time)."
        )
        self.images = p.Counter("yolo_train_images", "Images trained on, by rank.", ("rank",), registry=None)
        self.batch = p.Histogram(
            "yolo_train_batch_duration_seconds",
            "A training step: loader wait, forward, backward, optimizer; by rank.",
            ("rank",),
            registry=None,
            buckets=BATCH_BUCKETS,
        )
        self.wait = p.Counter(
            "yolo_train_dataloader_wait_seconds",
            "Time spent waiting for the data loader, by rank (high against batch time: loader-bound).",
            ("rank",),
            registry=None,
        )


_SERIES: Series | None = None


def series() -> Series:
    global _SERIES
    if _SERIES is None:
        _SERIES = Series()
    return _SERIES


class Publisher:
    """The callbacks of one rank."""

    def __init__(
        self, rank: int, environ: Mapping[str, str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rank = rank
        self.s = series()
        self._environ = environ
        self._clock = clock
        self._label = str(rank)
        self._mark: float | None = None
        self._wait = 0.0
        self._seen = 0
        self._batches_done = 0
        self._t0 = clock()
        self._last_loss = -math.inf

    # every rank
    def on_train_epoch_start(self, trainer: contract.Trainer) -> None:
        self._mark = self._clock()
        self._seen = self._batches_done = 0
        if self.rank == 0:
            self.s.epoch.set(int(trainer.epoch) + 1)
            self.s.epochs.set(int(trainer.epochs))

    def on_train_batch_start(self, trainer: contract.Trainer) -> None:
        now = self._clock()
        self._wait = now - self._mark if self._mark is not None else 0.0

    def on_train_batch_end(self, trainer: contract.Trainer) -> None:
        now = self._clock()
        if self._mark is None:
            return
        loader = getattr(trainer, "train_loader", None)
        images = images_in_batch(int(getattr(loader, "batch_size", 0) or 0), _shard_size(loader), self._seen)
        self._seen += images
        self._batches_done += 1
        self.s.images.labels(self._label).inc(images)
        self.s.wait.labels(self._label).inc(self._wait)
        self.s.batch.labels(self._label).observe(now - self._mark)
        self._mark = now
        if self.rank == 0:
            self._progress(trainer, self._batches_done, len(loader) if loader is not None else 0)
            self._learning_rates(trainer)
            if now - self._last_loss >= LOSS_EVERY_S:
                self._last_loss = now
                self._losses(trainer)

    # rank 0 (Ultralytics runs these on rank 0 only, or they only matter there)
    def on_train_start(self, trainer: contract.Trainer) -> None:
        self._t0 = self._clock()
        if self.rank != 0:
            return
        self.s.info.labels(
            run=_name(getattr(trainer, "save_dir", "")),
            model=_name(getattr(trainer.args, "model", "")),
            data=_name(getattr(trainer.args, "data", "")),
            stack=self._environ.get(versions.STACK_ENV, ""),
            ultralytics_version=_ultralytics_version(),
            world_size=str(max(int(getattr(trainer, "world_size", 1) or 1), 1)),
        ).set(1)
        self.s.epochs.set(int(trainer.epochs))
        self._progress(trainer, 0, 1)  # a resumed run starts part of the way

    def on_fit_epoch_end(self, trainer: contract.Trainer) -> None:
        if self.rank != 0:
            return
        self._progress(trainer, 1, 1)  # the epoch with its validation
        self._losses(trainer)
        for key, name in VAL_KEYS.items():
            value = (getattr(trainer, "metrics", None) or {}).get(key)
            if value is not None:
                self.s.val[name].set(float(value))

    def on_model_save(self, trainer: contract.Trainer) -> None:
        if self.rank == 0:
            self.s.checkpoint.set(time.time())

    def on_train_end(self, trainer: contract.Trainer) -> None:
        if self.rank == 0:
            self.s.eta.set(0)

    def _progress(self, trainer: contract.Trainer, batches_done: int, batches: int) -> None:
        start = int(getattr(trainer, "start_epoch", 0) or 0)
        epoch = int(getattr(trainer, "epoch", start) or 0)  # Ultralytics sets it at the first epoch
        p = progress(epoch, batches_done, batches, int(trainer.epochs), start, self._clock() - self._t0)
        self.s.progress.set(p.ratio)
        if p.eta_s is not None:
            self.s.eta.set(p.eta_s)

    def _losses(self, trainer: contract.Trainer) -> None:
        tloss = getattr(trainer, "tloss", None)
        if not isinstance(tloss, Mapping):
            return
        for name, value in tloss.items():
            self.s.loss.labels(str(name).removesuffix("_loss")).set(float(value))

    def _learning_rates(self, trainer: contract.Trainer) -> None:
        optimizer = getattr(trainer, "optimizer", None)
        for group, params in enumerate(getattr(optimizer, "param_groups", ()) or ()):
            self.s.lr.labels(str(group)).set(float(params["lr"]))

    def callbacks(self) -> dict[str, Callable[[contract.Trainer], None]]:
        names = (
            "on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end",
            "on_fit_epoch_end", "on_model_save", "on_train_end",
        )  # fmt: skip
        return {name: _guarded(getattr(self, name)) for name in names}


def _ultralytics_version() -> str:
    return ultra.version()


def _shard_size(loader: contract.Loader | None) -> int | None:
    """The images of this rank's share of the epoch; None where the sampler has no length."""
    try:
        return len(loader.sampler) if loader is not None else None
    except TypeError:  # a sampler without __len__
        return None


def _guarded(callback: Callable[[contract.Trainer], None]) -> Callable[[contract.Trainer], None]:
    """Metrics never stop a run: a failure is one INFO line, then that callback stays quiet."""
    failed = False

    def run(trainer: contract.Trainer) -> None:
        nonlocal failed
        if failed:
            return
        try:
            callback(trainer)
        except Exception as e:
            failed = True
            LOG.info("%s failed (%s: %s); the run goes on", callback.__name__, type(e).__name__, e)

    return run


def attach(model: Any, environ: MutableMapping[str, str] | None = None) -> Publisher | None:
    """Publish this rank's series during the model's next train(); serve them too when this process
    is the node's only one. None when the node serves no metrics."""
    log.setup()
    env = os.environ if environ is None else environ
    serve_node(env, launcher=False)  # before prometheus-client is imported: it reads the directory once
    if config.publish_dir(env) is None:
        return None
    publisher = Publisher(rankenv.rank(env), env)
    for event, callback in publisher.callbacks().items():
        model.add_callback(event, callback)
    return publisher
