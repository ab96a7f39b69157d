"""What a resumed run puts back, decided from the checkpoint's `Pending` and this run.

- Another geometry (batch, world size, data: another number of batches per rank) shares the
  epoch's images out differently: a mid-epoch checkpoint's epoch runs again from its start, and
  the accumulation numbering restarts (the saved step counts batches of the other geometry), so the
  optimizer steps at once. One WARNING every time, at epoch-end checkpoints too.
- Ultralytics loads a checkpoint onto the CPU: every restored tensor (the running loss, the loss
  items, the gradients) goes to the training device.
- Accumulated gradients are scaled by the AMP scaler's scale at backward (1 without AMP: the CPU):
  on a resume under another scale (CPU<->GPU, a fresh scaler) they are scaled by the ratio.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rig.yolo import resumable


def fitted(pending: resumable.Pending, batches: int) -> tuple[resumable.Pending, str | None]:
    """pending for a run with `batches` per rank, and the WARNING to log when the geometry changed."""
    if not pending.batches or pending.batches == batches:
        return pending, None
    what = f"was saved with {pending.batches} batches per rank; this run has {batches}"
    if pending.done:
        why = f"at batch {pending.done}: its epoch runs again from its start"
    else:
        why = "at an epoch's end"
    warning = (
        f"{what} (another batch, world size or data), {why}; the accumulation restarts: the "
        "optimizer steps at the first batch"
    )
    return dataclasses.replace(pending, done=0, gradients={}, tloss=None, last_opt_step=-1), warning


def on_device(value: Any, device: Any) -> Any:
    """value (a tensor, or a dict, list or tuple of them) on `device`; anything else as it is."""
    if isinstance(value, Mapping):
        return {k: on_device(v, device) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_device(v, device) for v in value)
    to = getattr(value, "to", None)
    return to(device) if callable(to) else value


def gradients_scaled(gradients: Mapping[str, Any], saved: float, now: float) -> dict[str, Any]:
    """Gradients accumulated under scale `saved`, as backward under scale `now` would have them."""
    if saved == now or not gradients:
        return dict(gradients)
    factor = now / saved
    return {name: g * factor for name, g in gradients.items()}
