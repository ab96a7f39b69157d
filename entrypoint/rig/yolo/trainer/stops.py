"""The stop agreement as the trainer keeps it: the ranks agreed on a signal between two batches
(or two validation batches); the run ends at that boundary, its checkpoint written once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Stop:
    stopping: bool = False  # the ranks agreed to stop: the run ends at this boundary
    signal: int = 0  # the agreed signal
    saved: bool = False  # the stop's checkpoint is written

    def agreed(self, signum: int) -> None:
        self.stopping, self.signal = True, signum


class FrozenStopper:
    """Ultralytics' EarlyStopping as it was before a stop: calling it changes nothing, stops nothing,
    so the checkpoint keeps the best epoch and fitness of whole epochs."""

    def __init__(self, stopper: Any) -> None:
        self.rig_stopper = getattr(stopper, "rig_stopper", stopper)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rig_stopper, name)

    def __call__(self, _epoch: int, _fitness: Any) -> bool:
        return False
