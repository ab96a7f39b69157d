"""When rank 0 writes a checkpoint inside an epoch, and what a periodic one that cannot be written
does: one WARNING, the previous checkpoint stays (every save is atomic), training goes on. A stop's
checkpoint is the run's last word: its failure ends the run with the error."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rig import log

_logger = log.get("trainer")


@dataclass
class Cadence:
    """Periodic checkpoints every `every` seconds (0: none inside an epoch), from the last save."""

    every: Callable[[], float]
    clock: Callable[[], float] = time.monotonic
    last: float = field(default=0.0)

    def started(self) -> None:
        self.last = self.clock()

    def due(self) -> bool:
        every = self.every()
        return every > 0 and self.clock() - self.last >= every

    def saved(self) -> float:
        """Marks a save (or a failed try: the next comes `every` seconds on); the time now."""
        self.last = self.clock()
        return self.last


def periodic(write: Callable[[], None], where: object) -> bool:
    """write() a periodic checkpoint of `where`; an OSError (a full disk, an I/O error) is one WARNING
    and False: the run continues, its previous checkpoint in place."""
    try:
        write()
    except OSError as e:
        _logger.warning(
            "checkpoint: could not write %s (%s); the previous checkpoint stays, training continues",
            where,
            e.strerror or e,
        )
        return False
    return True
