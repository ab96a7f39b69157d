# mypy: disable-error-code="safe-super"
# (DeviceAugmented's base is contract.Dataset, a Protocol, for the type check only.)
"""The train dataset whose transforms leave their pixel work to the training device (the pipeline:
rig.yolo.augment).

Ultralytics' training pipeline (v8_transforms, then Format) spends a worker's time, per image, on
Mosaic's canvas (np.full and four copies), RandomPerspective's warpAffine (~3 ms at 640 px),
RandomHSV (BGR -> HSV, three lookup tables, back: ~3 ms) and Format's BGR -> RGB flip into CHW
(~1.4 ms). Here a train dataset's transforms keep every step and every random draw as they are
(rig.yolo.augment.deferred: Ultralytics' own get_params and apply_instances, so the labels, the
candidate filter and the clipping are theirs), and hand over instead of pixels:
- the geometry, where the recipe is v8_transforms' own (Mosaic, RandomPerspective, RandomFlip, and
  mixup, cutmix, copy_paste and Albumentations inactive, as by default): the tiles of the canvas
  the warp reads and the matrix (rig.yolo.augment.warp_job), packed per batch by the dataset's collate;
- otherwise the image after the geometric steps, HWC uint8 BGR;
- one row of colour and layout parameters (HSV gains, Format's BGR -> RGB coin, the flips).
rig.yolo.augment.device finishes the batch on the training device.

Validation datasets (no augmentation), datasets whose pipeline is not the stock one (another
Format, no RandomHSV) and RIG_DEVICE_AUGMENT=0 keep Ultralytics' pipeline untouched.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from rig import flags, log
from rig.yolo import contract, ultra, ultracheck
from rig.yolo.augment import deferred, warp_job
from rig.yolo.nodecache import cached_dataset

_logger = log.get("trainer")
SWITCH = "RIG_DEVICE_AUGMENT"  # 0: Ultralytics' own pipeline, all of it in the workers
PREFIX = "DeviceAugmented"


def enabled(environ: Mapping[str, str]) -> bool:
    """On unless RIG_DEVICE_AUGMENT=0 or the installed Ultralytics lacks what it needs (said at start)."""
    return flags.switched_on(environ, SWITCH) and ultracheck.feature_on(contract.DEVICE_AUGMENT)


def describe(on: bool) -> str:
    """The one line `rig train` logs about it."""
    if on:
        return (
            "device augment: the loader workers draw the augmentation and transform the labels; mosaic, "
            "the affine warp, RandomHSV and the BGR->RGB/CHW layout run batched on the training device "
            "(RIG_DEVICE_AUGMENT=0: stock)"
        )
    return "device augment off (RIG_DEVICE_AUGMENT=0): Ultralytics' own pipeline, all of it in the workers"


def _augment() -> contract.Augment:
    return ultra.augment()


def defer(transforms: Any) -> Any:
    """transforms (a dataset's Compose) with its pixel work deferred: colour and layout where the
    pipeline ends as the stock one does, the geometry too where it is v8_transforms' own (see
    geometry_kept); the same object unchanged when its shape is not the stock training pipeline's."""
    aug = _augment()
    if not isinstance(transforms, aug.Compose):
        return transforms
    steps = list(cast(contract.Compose, transforms).transforms)
    hsv = [i for i, t in enumerate(steps) if type(t) is aug.RandomHSV]
    if len(hsv) != 1 or not steps or type(steps[-1]) is not aug.Format:
        return transforms
    kept = geometry_kept(steps, hsv[0])
    if kept is None:
        pre = cast(contract.Compose, steps[0])
        pre.transforms = [
            deferred.defer(t, "DeferredMosaic" if type(t) is aug.Mosaic else "DeferredPerspective")
            if type(t) in {aug.Mosaic, aug.RandomPerspective}
            else t
            for t in pre.transforms
        ]
        steps[hsv[0] + 1 : -1] = [deferred.defer(t, "DeferredFlip") for t in steps[hsv[0] + 1 : -1]]
    else:
        _note_once(f"device augment: {kept}: mosaic and the affine warp stay in the loader workers")
    steps[hsv[0]] = deferred.defer(steps[hsv[0]], "DeferredHSV")
    steps[-1] = deferred.defer(steps[-1], "DeferredFormat")
    cast(contract.Compose, transforms).transforms = steps
    return transforms


def geometry_kept(steps: list[Any], hsv: int) -> str | None:
    """Why the geometry of this pipeline stays in the workers, or None: it moves when it is
    v8_transforms' own (a 2x2 Mosaic, then RandomPerspective) and nothing between it and RandomHSV
    works on its pixels (MixUp, CutMix and CopyPaste with p=0, Albumentations without transforms,
    as by default), and only RandomFlips follow RandomHSV."""
    aug = _augment()
    pre = steps[0] if steps else None
    inner = list(cast(contract.Compose, pre).transforms) if type(pre) is aug.Compose else []
    busy = sorted(
        {type(t).__name__ for t in [*inner, *steps[1:hsv]] if not _idle(t, aug)}
        - {"Mosaic", "RandomPerspective"}
    )
    if busy:
        verb = "works" if len(busy) == 1 else "work"
        return f"the recipe's {' and '.join(busy)} {verb} on the pixels between mosaic and RandomHSV"
    kinds = [type(t) for t in inner if not _idle(t, aug)]
    if kinds != [aug.Mosaic, aug.RandomPerspective] or any(
        type(t) is aug.Mosaic and cast(contract.Mosaic, t).n != 4 for t in inner
    ):
        return "the recipe's first steps are not a 2x2 Mosaic then RandomPerspective"
    if any(type(t) is not aug.RandomFlip for t in steps[hsv + 1 : -1]):
        return "a step after RandomHSV is not RandomFlip"
    return None


def _idle(step: Any, aug: contract.Augment) -> bool:
    """A step that never touches the pixels: mixing with probability 0, Albumentations without any."""
    if type(step) in {aug.MixUp, aug.CutMix, aug.CopyPaste}:
        return float(cast(contract.Mixing, step).p) == 0.0
    if type(step) is aug.Albumentations:
        return cast(contract.Albumentations, step).transform is None
    return False


def __getattr__(name: str) -> Any:
    """The DeviceAugmented dataset classes and their collate functions, made on first use (so that a
    spawn-started loader worker can unpickle them by name)."""
    if name.startswith(PREFIX):
        inner = name.removeprefix(PREFIX)
        if inner.startswith("NodeCached"):
            base = getattr(cached_dataset, inner)
        else:
            base = getattr(ultra.data_dataset(), inner, None)
        if base is not None:
            return device_augmented(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    _Dataset = contract.Dataset
else:
    _Dataset = object


class DeviceAugmented(_Dataset):
    """A dataset (`device_augmented` puts this in front of its class) whose training transforms
    (built again when mosaic closes) leave their pixel work to the device."""

    def build_transforms(self, hyp: Any = None) -> Any:
        transforms = super().build_transforms(hyp)
        return defer(transforms) if self.augment else transforms


@functools.cache
def device_augmented(base: type) -> type:
    """base with DeviceAugmented in front, and a collate that packs the geometry's tiles; both
    importable by name from this module."""
    name = f"{PREFIX}{base.__name__}"
    base_collate = cast(contract.Dataset, base).collate_fn

    def collate_fn(batch: list[dict[str, Any]]) -> dict[str, Any]:
        return collate(batch, base_collate)

    collate_fn.__module__, collate_fn.__qualname__ = __name__, f"{name}.collate_fn"
    namespace = {"__module__": __name__, "__qualname__": name, "collate_fn": staticmethod(collate_fn)}
    return type(name, (DeviceAugmented, base), namespace)


def collate(
    batch: list[dict[str, Any]], base_collate: Callable[[list[dict[str, Any]]], dict[str, Any]]
) -> dict[str, Any]:
    """Ultralytics' collate, with the images of a deferred geometry packed (warp_job.pack)."""
    jobs = [b.get("img") for b in batch]
    if not any(isinstance(j, warp_job.WarpJob) for j in jobs):
        return base_collate(batch)
    if not all(isinstance(j, warp_job.WarpJob) for j in jobs):
        raise TypeError("a batch mixes images whose geometry was deferred with images whose was not")
    for b in batch:
        del b["img"]
    out = base_collate(batch)
    out.update(warp_job.pack(jobs))  # type: ignore[arg-type]
    return out


@contextlib.contextmanager
def in_use(mode: str, environ: Mapping[str, str] | None = None, announce: bool = True) -> Iterator[None]:
    """While Ultralytics builds the train dataset, the classes it instantiates defer their pixel work
    (unless RIG_DEVICE_AUGMENT=0). Entered by rig.yolo.augment.building, in its place among the
    wrappers: it wraps whatever class is there."""
    env = os.environ if environ is None else environ
    if mode != "train":
        yield
        return
    if announce:
        _announce(enabled(env), env)
    if not enabled(env):
        yield
        return
    with ultra.datasets_built_as(device_augmented):
        yield


_announced = False
_noted: set[str] = set()


def _first_rank(environ: Mapping[str, str]) -> bool:
    return environ.get("RANK", "0") in {"0", "-1"}


def _announce(on: bool, environ: Mapping[str, str]) -> None:
    """Once per run: on global rank 0, the first time a train dataset is built."""
    global _announced
    if not _announced and _first_rank(environ):
        _logger.info(describe(on))
    _announced = True


def _note_once(line: str) -> None:
    if line not in _noted and _first_rank(os.environ):
        _logger.info("%s", line)
    _noted.add(line)
