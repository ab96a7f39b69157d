"""Ultralytics' training transforms with their pixel work left to the training device.

Each class subclasses Ultralytics' own and changes only `apply_image`: `get_params` (every random
draw, in Ultralytics' order) and `apply_instances` (boxes, segments, keypoints, the candidate filter,
the clipping) are Ultralytics' code, run as they are, so the labels are theirs for the same draws.
- DeferredMosaic: the layout as drawn; the canvas stays tiles (rig.yolo.warp_job.WarpJob).
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

import functools
import importlib
import random
from typing import Any

from rig.yolo import ultra
from rig.yolo.warp_job import Tile, WarpJob

KEY = "rig_device_tail"  # per image: rig.yolo.hsv_device.PARAMS
_GAINS = "rig_hsv_gains"  # RandomHSV -> Format, inside one sample's transforms
NAMES = ("DeferredMosaic", "DeferredPerspective", "DeferredFlip", "DeferredHSV", "DeferredFormat")


@functools.cache
def classes() -> dict[str, Any]:
    aug: Any = ultra.module("data.augment")
    np: Any = importlib.import_module("numpy")
    torch: Any = importlib.import_module("torch")

    class DeferredMosaic(aug.Mosaic):  # type: ignore[misc]
        def apply_image(self, labels: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
            assert params is not None and self.n == 4, "rig defers 2x2 mosaics only (v8_transforms' own)"
            tiles = []
            for item in params["layout"]:  # Mosaic.apply_image's copies, as regions of the canvas
                img = np.asarray(item["labels_patch"]["img"])  # a node cache's memmap: a plain view
                tiles.append(
                    Tile(img[item["y1b"] : item["y2b"], item["x1b"] : item["x2b"]], item["x1a"], item["y1a"])
                )
            size = self.imgsz * 2
            labels["img"] = WarpJob(tiles, size, size, int(labels["img"].shape[2]))
            return labels

    class DeferredPerspective(aug.RandomPerspective):  # type: ignore[misc]
        def apply_image(self, labels: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
            assert params is not None
            img = labels["img"]
            job = img if isinstance(img, WarpJob) else WarpJob.single(img)
            job.warp(params["M"], params["size"], bool(self.perspective))
            labels["img"] = job
            labels["resized_shape"] = job.shape[:2]
            return labels

    class DeferredFlip(aug.RandomFlip):  # type: ignore[misc]
        def apply_image(self, labels: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
            img = labels["img"]
            if not isinstance(img, WarpJob):
                flipped: dict[str, Any] = super().apply_image(labels, params)
                return flipped
            if params is not None and params["flip"]:
                img.flip(params["direction"])
            return labels

    class DeferredHSV(aug.RandomHSV):  # type: ignore[misc]
        def apply_image(self, labels: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
            img = labels["img"]
            if img.shape[-1] == 3 and (self.hgain or self.sgain or self.vgain):  # as RandomHSV
                r = np.random.uniform(-1, 1, 3) * [self.hgain, self.sgain, self.vgain]
                labels[_GAINS] = (1.0, *(float(x) for x in r))
            return labels

    class DeferredFormat(aug.Format):  # type: ignore[misc]
        def apply_image(self, labels: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
            img = labels.pop("img", None)
            gains = labels.pop(_GAINS, (0.0, 0.0, 0.0, 0.0))
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
                    np.ascontiguousarray(img[:: -1 if flip_h else 1, :: -1 if flip_w else 1])
                )
            labels["img"] = img
            labels[KEY] = torch.tensor(
                (*gains, float(to_rgb), float(flip_w), float(flip_h)), dtype=torch.float64
            )
            return labels

    made = {
        "DeferredMosaic": DeferredMosaic,
        "DeferredPerspective": DeferredPerspective,
        "DeferredFlip": DeferredFlip,
        "DeferredHSV": DeferredHSV,
        "DeferredFormat": DeferredFormat,
    }
    for name, cls in made.items():
        cls.__module__, cls.__qualname__ = __name__, name
    return made


def defer(step: Any, name: str) -> Any:
    """A shallow copy of the transform step (its settings, as they are) as the class `name`."""
    import copy

    new = copy.copy(step)
    new.__class__ = classes()[name]
    return new


def __getattr__(name: str) -> Any:
    """The classes by name, made on first use (unpickling in a spawned worker)."""
    if name in NAMES:
        return classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
