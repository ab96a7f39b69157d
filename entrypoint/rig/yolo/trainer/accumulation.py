"""The accumulation and the optimizer's step: Ultralytics' rule seen from outside its loop.

Ultralytics' `_do_train` keeps `last_opt_step` in a local, -1 in every process (a resumed one too),
and steps when `ni - last_opt_step >= accumulate`. After a resume the first step must come where
the uninterrupted run's came: `accumulate` reads `offset` (the saved step + 1) past its value until
the first step. A resume into another geometry restarts the numbering (`restart`): Ultralytics'
own rule from -1, so the optimizer steps at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Accumulation:
    nominal: int = 1  # what Ultralytics sets: nbs / batch, ramped by its warmup
    offset: int = 0  # added to `nominal` until the first step after a resume
    last_step: int = -1  # the iteration (epoch * batches + batch) of the optimizer's last step

    @property
    def accumulate(self) -> int:
        return self.nominal + self.offset

    def stepped(self, iteration: int) -> None:
        self.last_step = iteration
        self.offset = 0

    def resumed(self, last_step: int) -> None:
        """Continue the saved run's numbering: the next step `nominal` batches after `last_step`."""
        self.last_step = last_step
        self.offset = last_step + 1

    def restart(self) -> None:
        """Ultralytics' numbering from -1 (no saved step counts): the next batch steps."""
        self.resumed(-1)


def iteration(epoch: int, batch: int, batches: int) -> int:
    """Ultralytics' `ni`: the batch's index counted over the run."""
    return batch + batches * epoch
