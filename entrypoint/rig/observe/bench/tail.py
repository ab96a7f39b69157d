"""The device tail: the work ours' loader leaves to the training device (rig.yolo.augment.device),
timed on one real batch of ours, per part and whole.

PARTS lists the tail's parts in the order `device.finish` runs them; each takes the batch as the
parts before it left it and returns it as the next part gets it. A new part (geometry before the
colour, say) is one more TailPart here, and the table and JSON (loader.device_tail_parts) show it.
The whole tail is always `device.finish` itself, so the sum of the parts can be checked
against it, and the step is charged the whole.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rig.yolo.augment import device as augment_device

REPEATS = 5


@dataclass(frozen=True)
class TailPart:
    name: str
    run: Callable[[dict[str, Any], Any], dict[str, Any]]  # (batch, device) -> batch


def _geometry(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    return augment_device.finish_geometry(batch, device)


def _colour_and_layout(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    return augment_device.finish_colour(batch, device)


PARTS: tuple[TailPart, ...] = (
    TailPart("mosaic and warp", _geometry),
    TailPart("colour and layout", _colour_and_layout),
)


def images_in(batch: dict[str, Any]) -> int:
    """The images a batch of ours holds (what the loader's and the tail's rates count). The one place the
    bench reads it: a batch whose geometry is finished on the device hands over tiles, not images."""
    return augment_device.images_in(batch)


def _copy(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch as the loader hands it over, with its own tensors (the tail works in place)."""
    return {k: (v.clone() if hasattr(v, "clone") else v) for k, v in batch.items()}


def _timed(fn: Callable[[dict[str, Any], Any], dict[str, Any]], batch: dict[str, Any], device: Any) -> float:
    """The median of REPEATS runs after one warm-up, synchronised, the host-to-device copy included."""
    torch: Any = importlib.import_module("torch")
    times = []
    for i in range(REPEATS + 1):
        copy = _copy(batch)
        if device.type == "cuda":
            if copy["img"].device.type == "cpu":  # as the loader hands it over (pin_memory=True)
                copy["img"] = copy["img"].pin_memory()
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn(copy, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ms_per_image(batch: dict[str, Any], device: Any) -> tuple[float | None, dict[str, float]]:
    """(the whole tail, each part) in ms per image; (None, {}) when the workers finished the batch
    (RIG_DEVICE_AUGMENT=0, or a pipeline ours does not change)."""
    if augment_device.KEY not in batch:
        return None, {}
    images = images_in(batch)
    parts: dict[str, float] = {}
    if len(PARTS) > 1:  # one part is the whole: timed once
        current = _copy(batch)
        for part in PARTS:
            parts[part.name] = 1000 * _timed(part.run, current, device) / images
            current = part.run(_copy(current), device)
    whole = 1000 * _timed(lambda b, d: augment_device.finish(b, d), batch, device) / images
    return whole, parts or {PARTS[0].name: whole}
