"""A training batch finished on the training device: what the loader workers left of the augmentation
(rig.yolo.augment.dataset) done batched where the batch goes anyway, before Ultralytics' own
normalisation. The geometry first (rig.yolo.augment.warp: Mosaic's canvas and RandomPerspective's
warp), then colour and layout (rig.yolo.augment.colour: RandomHSV, the flips, BGR -> RGB and CHW).

torch is imported by the functions, never at module import: `rig` stays importable without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rig.yolo.augment import colour, deferred, warp, warp_job

KEY = deferred.KEY  # per image: the colour and layout row (rig.yolo.augment.colour.PARAMS)
HANDED_OVER = ("img", KEY, warp_job.GEOM, warp_job.TILES)  # what `finish` takes from a batch


def images_in(batch: Mapping[str, Any]) -> int:
    """The number of images in a collated training batch, whatever form its "img" has."""
    return len(batch["im_file"])


def handed_over(batch: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of what `finish` takes from the batch (to time it again on the same data)."""
    return {k: (v.clone() if k == "img" else v) for k, v in batch.items() if k in HANDED_OVER}


def finish(batch: dict[str, Any], device: Any, kernels: str | None = None) -> dict[str, Any]:
    """A collated training batch as Ultralytics' Format would have stacked it, on device: its "img"
    (N, C, H, W) uint8 RGB. A batch the workers finished themselves passes through unchanged.
    kernels: "torch" or "opencv" (None: torch's on an accelerator, Ultralytics' OpenCV calls on a CPU)."""
    if KEY not in batch:
        return batch
    return finish_colour(finish_geometry(batch, device, kernels), device, kernels)


def finish_geometry(batch: dict[str, Any], device: Any, kernels: str | None = None) -> dict[str, Any]:
    """The first part of `finish`: a packed geometry (mosaic, the warp) rendered, "img" (N, H, W, C)
    uint8 BGR on device; a batch without one passes through."""
    geometry = batch.pop(warp_job.GEOM, None)
    if geometry is not None:
        tiles = batch.pop(warp_job.TILES)
        batch["img"] = warp.render(batch["img"], geometry, tiles, device, kernels)
    return batch


def finish_colour(batch: dict[str, Any], device: Any, kernels: str | None = None) -> dict[str, Any]:
    """The second part of `finish`: HSV, the flips and the layout (rig.yolo.augment.colour.tail)."""
    rows = batch.pop(KEY)
    torch: Any = importlib.import_module("torch")
    params = torch.stack(list(rows)) if isinstance(rows, (list, tuple)) else rows
    img = batch["img"].to(device, non_blocking=getattr(device, "type", str(device)) not in {"cpu", "mps"})
    batch["img"] = colour.tail(img, params, kernels)
    return batch
