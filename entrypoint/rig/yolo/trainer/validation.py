"""Validation the ranks can end between its batches: a stop during a validation pass."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rig.yolo import contract


class ValidationStopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stoppable(
    validator: contract.Validator, fewest: Callable[[int], int], agreed: Callable[[int, int], int]
) -> Iterator[None]:
    """A validation pass the ranks can agree to end between its batches: at its start `fewest`
    (the fewest batches any rank has), after each batch `agreed(done, common)` (a signal or 0);
    an agreed signal raises ValidationStopped. The validator's callbacks are as before afterwards."""
    common = {"batches": 0}

    def start(v: contract.Validator) -> None:
        common["batches"] = fewest(len(v.dataloader))

    def batch_end(v: contract.Validator) -> None:
        signum = agreed(int(v.batch_i) + 1, common["batches"])
        if signum:
            raise ValidationStopped(signum)

    kept = {e: list(validator.callbacks.get(e, [])) for e in ("on_val_start", "on_val_batch_end")}
    validator.add_callback("on_val_start", start)
    validator.add_callback("on_val_batch_end", batch_end)
    try:
        yield
    finally:
        for event, callbacks in kept.items():
            validator.callbacks[event] = callbacks
