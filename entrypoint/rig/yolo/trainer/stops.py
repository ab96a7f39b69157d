"""The stop agreement as the trainer keeps it: the ranks agreed on a signal between two batches
(or two validation batches); the run ends at that boundary, its checkpoint written once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rig.yolo import contract


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

    def __init__(self, stopper: contract.Stopper) -> None:
        self.rig_stopper: contract.Stopper = (
            stopper.rig_stopper if isinstance(stopper, FrozenStopper) else stopper
        )

    @property
    def best_fitness(self) -> Any:
        return self.rig_stopper.best_fitness

    @best_fitness.setter
    def best_fitness(self, value: Any) -> None:
        self.rig_stopper.best_fitness = value

    @property
    def best_epoch(self) -> int:
        return self.rig_stopper.best_epoch

    @best_epoch.setter
    def best_epoch(self, value: int) -> None:
        self.rig_stopper.best_epoch = value

    def __getattr__(self, name: str) -> Any:  # what Ultralytics reads besides (possible_stop...)
        return getattr(self.rig_stopper, name)

    def __call__(self, epoch: int, fitness: Any) -> bool:
        return False
