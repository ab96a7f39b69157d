# mypy: disable-error-code="safe-super"
# (each part's base is the contract's Protocol of its Ultralytics class, for the type check only.)
"""Ultralytics' training transforms with their pixel work left to the training device.

Each class subclasses Ultralytics' own and changes only `apply_image`: `get_params` (every random
draw, in Ultralytics' order) and `apply_instances` (boxes, segments, keypoints, the candidate filter,
the clipping) are Ultralytics' code, run as they are, so the labels are theirs for the same draws.
- DeferredMosaic: the layout as drawn; the canvas stays tiles (rig.yolo.augment.warp_job.WarpJob).
- DeferredPerspective: the matrix as drawn; the warp is recorded on the job (the loaded image's own
  job without mosaic), which keeps only the part of the canvas the warp reads.
- DeferredFlip: RandomFlip's coin as drawn; a job records the reversal.
- DeferredHSV: RandomHSV's gains as drawn (np.random.uniform(-1, 1, 3) times the gains, under the
  same conditions); the pixels are left alone.
- DeferredFormat: Format's BGR -> RGB coin as drawn; the image goes as it is (a job, or HWC uint8
  BGR, a flipped view's unflipped base) beside one row of the device tail's parameters.
The classes are made on first use (Ultralytics imports torch) and are importable by name from this
module, so a spawn-started loader worker can unpickle them.
"""

from __future__ import annotations

import copy
import functools
import importlib
import random
from typing import TYPE_CHECKING, Any, cast

from rig.yolo import contract, ultra
from rig.yolo.augment.warp_job import Tile, WarpJob

KEY = "rig_device_tail"  # per image: rig.yolo.augment.colour.PARAMS
_GAINS = "rig_hsv_gains"  # RandomHSV -> Format, inside one sample's transforms
NAMES = ("DeferredMosaic", "DeferredPerspective", "DeferredFlip", "DeferredHSV", "DeferredFormat")


class Sample(contract.Labels, total=False):
    """One sample's labels with rig's keys, as the deferred steps pass them on."""

    rig_hsv_gains: tuple[float, ...]
    rig_device_tail: Any


def _np() -> Any:
    return importlib.import_module("numpy")


if TYPE_CHECKING:
    _Mosaic = contract.Mosaic
    _Perspective = contract.RandomPerspective
    _Flip = contract.RandomFlip
    _HSV = contract.RandomHSV
    _Format = contract.Format
else:
    _Mosaic = _Perspective = _Flip = _HSV = _Format = object


class MosaicTiles(_Mosaic):
    """Mosaic's layout as drawn; the canvas stays tiles (in front of aug.Mosaic: DeferredMosaic)."""

    def apply_image(self, labels: contract.Labels, params: Any = None) -> contract.Labels:
        assert params is not None and self.n == 4, "rig defers 2x2 mosaics only (v8_transforms' own)"
        tiles = []
        for item in cast(contract.MosaicParams, params)["layout"]:  # Mosaic's copies, as regions
            img = _np().asarray(item["labels_patch"]["img"])  # a node cache's memmap: a plain view
            tiles.append(
                Tile(img[item["y1b"] : item["y2b"], item["x1b"] : item["x2b"]], item["x1a"], item["y1a"])
            )
        size = self.imgsz * 2
        labels["img"] = WarpJob(tiles, size, size, int(labels["img"].shape[2]))
        return labels


class PerspectiveMatrix(_Perspective):
    """RandomPerspective's matrix as drawn; the warp is recorded on the job."""

    def apply_image(self, labels: contract.Labels, params: Any = None) -> contract.Labels:
        assert params is not None
        drawn = cast(contract.PerspectiveParams, params)
        img = labels["img"]
        job = img if isinstance(img, WarpJob) else WarpJob.single(img)
        job.warp(drawn["M"], drawn["size"], bool(self.perspective))
        labels["img"] = job
        labels["resized_shape"] = job.shape[:2]
        return labels


class FlipRecorded(_Flip):
    """RandomFlip's coin as drawn; a job records the reversal."""

    def apply_image(self, labels: contract.Labels, params: Any = None) -> contract.Labels:
        img = labels["img"]
        if not isinstance(img, WarpJob):
            return super().apply_image(labels, params)
        drawn = cast(contract.FlipParams | None, params)
        if drawn is not None and drawn["flip"]:
            img.flip(drawn["direction"])
        return labels


class HsvGains(_HSV):
    """RandomHSV's gains as drawn (np.random.uniform(-1, 1, 3) times the gains, under the same
    conditions); the pixels are left alone."""

    def apply_image(self, labels: contract.Labels, params: Any = None) -> contract.Labels:
        sample = cast(Sample, labels)
        img = sample["img"]
        if img.shape[-1] == 3 and (self.hgain or self.sgain or self.vgain):  # as RandomHSV
            r = _np().random.uniform(-1, 1, 3) * [self.hgain, self.sgain, self.vgain]
            sample["rig_hsv_gains"] = (1.0, *(float(x) for x in r))
        return labels


class FormatRow(_Format):
    """Format's BGR -> RGB coin as drawn; the image goes as it is beside one row of the device tail's
    parameters."""

    def apply_image(self, labels: contract.Labels, params: Any = None) -> contract.Labels:
        torch: Any = importlib.import_module("torch")
        sample = cast(Sample, labels)
        img = sample.pop("img", None)
        gains = sample.pop("rig_hsv_gains", (0.0, 0.0, 0.0, 0.0))
        if img is None:
            return labels
        if isinstance(img, WarpJob):
            # Format's own draw, made whatever the channels (it is made before the `and`)
            to_rgb = random.uniform(0, 1) > self.bgr and img.channels == 3
            flip_w, flip_h = img.flip_w, img.flip_h
        else:
            if len(img.shape) < 3:
                img = img[..., None]
            to_rgb = random.uniform(0, 1) > self.bgr and img.shape[2] == 3
            # RandomFlip's np.fliplr/flipud are views: copying one (2-5 ms for a flipped HWC
            # image) would cost more than Format did. The view's unflipped base goes as it is
            # and the device reverses the pixels in its copy.
            flip_w, flip_h = img.strides[1] < 0, img.strides[0] < 0
            img = torch.from_numpy(
                _np().ascontiguousarray(img[:: -1 if flip_h else 1, :: -1 if flip_w else 1])
            )
        sample["img"] = img
        sample["rig_device_tail"] = torch.tensor(
            (*gains, float(to_rgb), float(flip_w), float(flip_h)), dtype=torch.float64
        )
        return labels


_PARTS: dict[str, tuple[type, str]] = {
    "DeferredMosaic": (MosaicTiles, "Mosaic"),
    "DeferredPerspective": (PerspectiveMatrix, "RandomPerspective"),
    "DeferredFlip": (FlipRecorded, "RandomFlip"),
    "DeferredHSV": (HsvGains, "RandomHSV"),
    "DeferredFormat": (FormatRow, "Format"),
}


@functools.cache
def classes() -> dict[str, type]:
    """The deferred steps: each part in front of Ultralytics' class, importable by name from here."""
    aug = ultra.augment()
    made = {}
    for name, (part, ultralytics_name) in _PARTS.items():
        base = getattr(aug, ultralytics_name)
        made[name] = type(name, (part, base), {"__module__": __name__, "__qualname__": name})
    return made


def defer(step: Any, name: str) -> Any:
    """A shallow copy of the transform step (its settings, as they are) as the class `name`."""
    new = copy.copy(step)
    new.__class__ = classes()[name]
    return new


def __getattr__(name: str) -> Any:
    """The classes by name, made on first use (unpickling in a spawned worker)."""
    if name in NAMES:
        return classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
