"""Training loader workers stop after the geometric steps; colour and layout finish on the device.

Ultralytics' training pipeline (v8_transforms, then Format) ends, per image on a CPU worker, with
RandomHSV (BGR -> HSV, three lookup tables, back: ~3 ms at 640 px) and Format's BGR -> RGB flip
into CHW (~1.4 ms). Both are per-pixel and independent of everything before them. Here a train
dataset's transforms keep every step and every random draw as they are, except that:
- RandomHSV draws its gains exactly as Ultralytics does (np.random.uniform(-1, 1, 3) times the
  hyperparameters, under the same conditions) and leaves the pixels alone;
- Format draws its BGR -> RGB coin exactly as Ultralytics does (random.uniform(0, 1) > bgr) and
  hands the uint8 image over as it is, HWC and BGR, beside one row of parameters (KEY); where
  RandomFlip left a flipped view, the unflipped pixels go and the row says which axes to reverse
  (the flip's draw and its labels stay the worker's);
so the workers' RNG streams, the labels, mosaic, mixup, the flips and every later draw are the
stock ones. The trainer's `preprocess_batch` calls `finish`, which applies rig.yolo.hsv_device's
batched tail on the training device, then Ultralytics' own normalisation follows.

Validation datasets (no augmentation), datasets whose pipeline is not the stock one (another
Format, no RandomHSV) and RIG_DEVICE_AUGMENT=0 keep Ultralytics' pipeline untouched.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

from rig import flags, log
from rig.yolo import ultra

_logger = log.get("trainer")
SWITCH = "RIG_DEVICE_AUGMENT"  # 0: Ultralytics' own pipeline, colour and layout in the workers
KEY = "rig_device_tail"  # per image: rig.yolo.hsv_device.PARAMS
_GAINS = "rig_hsv_gains"  # RandomHSV -> Format, inside one sample's transforms
_CLASSES = ("YOLODataset", "YOLOMultiModalDataset")  # the names build_yolo_dataset instantiates
PREFIX = "DeviceAugmented"


def enabled(environ: Mapping[str, str]) -> bool:
    return flags.switched_on(environ, SWITCH)


def describe(on: bool) -> str:
    """The one line `rig train` logs about it."""
    if on:
        return (
            "device augment: the loader workers stop after the geometric steps; RandomHSV and the "
            "BGR->RGB/CHW layout run batched on the training device (RIG_DEVICE_AUGMENT=0: stock)"
        )
    return "device augment off (RIG_DEVICE_AUGMENT=0): Ultralytics' own pipeline, colour in the workers"


def _augment() -> Any:
    return ultra.module("data.augment")


@functools.cache
def _deferred_classes() -> tuple[Any, Any]:
    aug = _augment()
    np: Any = importlib.import_module("numpy")
    torch: Any = importlib.import_module("torch")

    random_hsv: Any = aug.RandomHSV
    format_: Any = aug.Format

    class DeferredHSV(random_hsv):  # type: ignore[misc]
        """RandomHSV's draw, without its pixel work: the gains go with the sample."""

        def apply_image(self, labels: dict[str, Any], params: Any = None) -> dict[str, Any]:
            img = labels["img"]
            if img.shape[-1] == 3 and (self.hgain or self.sgain or self.vgain):  # as RandomHSV
                r = np.random.uniform(-1, 1, 3) * [self.hgain, self.sgain, self.vgain]
                labels[_GAINS] = (1.0, *(float(x) for x in r))
            return labels

    class DeferredFormat(format_):  # type: ignore[misc]
        """Format with its instances as they are, its image as HWC uint8 plus the tail's row."""

        def apply_image(self, labels: dict[str, Any], params: Any = None) -> dict[str, Any]:
            img = labels.pop("img", None)
            gains = labels.pop(_GAINS, (0.0, 0.0, 0.0, 0.0))
            if img is not None:
                if len(img.shape) < 3:
                    img = img[..., None]
                # Format's own draw, made whatever the channels (it is made before the `and`)
                to_rgb = random.uniform(0, 1) > self.bgr and img.shape[2] == 3
                # RandomFlip's np.fliplr/flipud are views: copying one (2-5 ms for a flipped HWC
                # image) would cost more than Format did. The view's unflipped base goes as it is
                # and the device reverses the pixels in its copy.
                flip_w, flip_h = img.strides[1] < 0, img.strides[0] < 0
                img = img[:: -1 if flip_h else 1, :: -1 if flip_w else 1]
                labels["img"] = torch.from_numpy(np.ascontiguousarray(img))
                row = (*gains, float(to_rgb), float(flip_w), float(flip_h))
                labels[KEY] = torch.tensor(row, dtype=torch.float64)
            return labels

    DeferredHSV.__module__ = DeferredFormat.__module__ = __name__
    DeferredHSV.__qualname__, DeferredFormat.__qualname__ = "DeferredHSV", "DeferredFormat"
    return DeferredHSV, DeferredFormat


def defer(transforms: Any) -> Any:
    """transforms (a dataset's Compose) with RandomHSV and the final Format deferred; the same object
    unchanged when its shape is not the stock training pipeline's."""
    aug = _augment()
    steps = list(getattr(transforms, "transforms", []))
    hsv = [i for i, t in enumerate(steps) if type(t) is aug.RandomHSV]
    if len(hsv) != 1 or not steps or type(steps[-1]) is not aug.Format:
        return transforms
    deferred_hsv, deferred_format = _deferred_classes()
    old_hsv, old_format = steps[hsv[0]], steps[-1]
    new_hsv, new_format = copy.copy(old_hsv), copy.copy(old_format)  # their settings, as they are
    new_hsv.__class__, new_format.__class__ = deferred_hsv, deferred_format
    steps[hsv[0]], steps[-1] = new_hsv, new_format
    transforms.transforms = steps
    return transforms


def __getattr__(name: str) -> Any:
    """DeferredHSV, DeferredFormat and the DeviceAugmented dataset classes, made on first use (so
    that a spawn-started loader worker can unpickle them by name)."""
    if name in {"DeferredHSV", "DeferredFormat"}:
        hsv, fmt = _deferred_classes()
        return hsv if name == "DeferredHSV" else fmt
    if name.startswith(PREFIX):
        inner = name.removeprefix(PREFIX)
        if inner.startswith("NodeCached"):
            base = getattr(importlib.import_module("rig.yolo.nodecache.cached_dataset"), inner)
        else:
            base = getattr(ultra.module("data.dataset"), inner, None)
        if base is not None:
            return device_augmented(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def device_augmented(base: Any) -> Any:
    """base whose training transforms (built again when mosaic closes) end before colour and layout."""

    class DeviceAugmented(base):  # type: ignore[misc]
        def build_transforms(self, hyp: Any = None) -> Any:
            transforms = super().build_transforms(hyp)
            return defer(transforms) if self.augment else transforms

    DeviceAugmented.__name__ = DeviceAugmented.__qualname__ = f"{PREFIX}{base.__name__}"
    DeviceAugmented.__module__ = __name__
    return DeviceAugmented


@contextlib.contextmanager
def in_use(mode: str, environ: Mapping[str, str] | None = None, announce: bool = True) -> Iterator[None]:
    """While Ultralytics builds the train dataset, the classes it instantiates defer colour and
    layout (unless RIG_DEVICE_AUGMENT=0). Enter it inside cached_dataset.in_use: it wraps whatever
    class is there."""
    env = os.environ if environ is None else environ
    if mode != "train":
        yield
        return
    if announce:
        _announce(enabled(env), env)
    if not enabled(env):
        yield
        return
    build: Any = ultra.module("data.build")
    kept = {name: getattr(build, name) for name in _CLASSES}
    for name, cls in kept.items():
        setattr(build, name, device_augmented(cls))
    try:
        yield
    finally:
        for name, cls in kept.items():
            setattr(build, name, cls)


_announced = False


def _announce(on: bool, environ: Mapping[str, str]) -> None:
    """Once per run: on global rank 0, the first time a train dataset is built."""
    global _announced
    if not _announced and environ.get("RANK", "0") in {"0", "-1"}:
        _logger.info(describe(on))
    _announced = True


def finish(batch: dict[str, Any], device: Any, kernels: str | None = None) -> dict[str, Any]:
    """A collated training batch as Ultralytics' Format would have stacked it, on device: its "img"
    (N, C, H, W) uint8 RGB. A batch the workers finished themselves passes through unchanged.
    kernels: as rig.yolo.hsv_device.tail (None: torch's on an accelerator, OpenCV's on a CPU)."""
    rows = batch.pop(KEY, None)
    if rows is None:
        return batch
    torch: Any = importlib.import_module("torch")
    from rig.yolo import hsv_device

    params = torch.stack(list(rows)) if isinstance(rows, (list, tuple)) else rows
    img = batch["img"].to(device, non_blocking=getattr(device, "type", str(device)) not in {"cpu", "mps"})
    batch["img"] = hsv_device.tail(img, params, kernels)
    return batch
