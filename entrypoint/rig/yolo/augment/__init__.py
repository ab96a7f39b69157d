"""The training augmentation, its pixel work moved from the loader workers to the training device.

The pipeline, one training image at a time in a loader worker, then one batch on the device:

  worker   Ultralytics' transforms draw as they do (`deferred`: Mosaic, RandomPerspective, RandomFlip,
           RandomHSV and Format with their `apply_image` replaced); the labels are Ultralytics' own.
           The image leaves as a `warp_job.WarpJob` (Mosaic's tiles and the warp's matrix) or, where
           the recipe is not v8_transforms' own, as pixels after the geometric steps; beside it one
           row of colour and layout parameters.
  collate  the dataset's collate (`dataset`) packs the jobs' tiles into the batch (`warp_job.pack`).
  device   the trainer's `preprocess_batch` calls `device.finish`: the canvas and the warp rendered
           in OpenCV's arithmetic (`warp`), then HSV, the flips and the BGR -> RGB/CHW layout
           (`colour`); Ultralytics' own normalisation follows. On a CPU both are Ultralytics' OpenCV
           calls, in the training process.

While Ultralytics builds a dataset, rig puts its wrappers in front of the dataset class, always in
one order (`building`, the one place that enters them): each wraps the class the one before it left,
so the last entered is the outermost.
  1. NodeCached (rig.yolo.nodecache.cached_dataset; cache=ram reads the node's image cache): the
     innermost, made over Ultralytics' own class only (its name finds its base there);
  2. DeviceAugmented (`dataset`): its `build_transforms` defers the pixel work of whatever
     transforms the class inside builds;
  3. Seeded (rig.yolo.draws, exact resume): the outermost, so each item's draws are seeded from its
     key before any other `__getitem__` runs;
and around the build, the file screen (rig.yolo.ultra.screened_files: a FIFO among the images is a
corrupt image, not a hang). A loader worker started by spawn unpickles such a class by its name
(rig.yolo.draws.SeededDeviceAugmentedNodeCachedYOLODataset), which each module makes again from its
prefix, outermost first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from rig.yolo import contract, draws, ultra
from rig.yolo.augment import dataset
from rig.yolo.augment.device import finish
from rig.yolo.nodecache import cached_dataset

__all__ = ["building", "finish"]


@contextlib.contextmanager
def building(
    cfg: contract.Cfg,
    mode: str,
    *,
    exact: bool,
    guards: bool | None,
    environ: Mapping[str, str] | None = None,
    announce: bool = True,
) -> Iterator[None]:
    """While Ultralytics builds a dataset (build_yolo_dataset), its class is rig's: the node image
    cache where cfg asks for cache=ram, then for training the device augmentation (unless
    RIG_DEVICE_AUGMENT=0 in environ, the process's by default; `announce`: its one INFO line) and,
    with `exact`, the seeded draws of exact resume; the file screen around it all (`guards`: the
    installed Ultralytics has what it replaces; None: ask rig.yolo.ultracheck). Each only where the
    installed Ultralytics has its names."""
    with (
        cached_dataset.in_use(cfg),
        dataset.in_use(mode, environ, announce),
        draws.in_use(mode, exact),
        ultra.screened_files(guards),
    ):
        yield
