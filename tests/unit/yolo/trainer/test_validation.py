"""A validation pass the ranks can end between its batches."""

from __future__ import annotations

from typing import Any

import pytest
from rig.yolo.trainer import validation


class _Validator:
    """Ultralytics' validator as far as callbacks go."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Any]] = {"on_val_start": ["theirs"]}
        self.dataloader = [0] * 6
        self.batch_i = 0

    def add_callback(self, event: str, callback: Any) -> None:
        self.callbacks.setdefault(event, []).append(callback)

    def run(self, batches: int) -> None:
        self.callbacks["on_val_start"][-1](self)
        for self.batch_i in range(batches):
            self.callbacks["on_val_batch_end"][-1](self)


def test_an_agreed_signal_ends_the_pass_and_the_callbacks_are_put_back() -> None:
    v = _Validator()
    asked: list[tuple[int, int]] = []

    def agreed(done: int, common: int) -> int:
        asked.append((done, common))
        return 15 if done == 3 else 0

    with (
        pytest.raises(validation.ValidationStopped) as stopped,
        validation.stoppable(v, fewest=lambda n: n - 2, agreed=agreed),
    ):
        v.run(6)
    assert stopped.value.signum == 15
    assert asked == [(1, 4), (2, 4), (3, 4)]  # the fewest batches any rank has: 6 - 2 here
    assert v.callbacks == {"on_val_start": ["theirs"], "on_val_batch_end": []}


def test_a_pass_no_rank_stops_runs_to_its_end() -> None:
    v = _Validator()
    with validation.stoppable(v, fewest=lambda n: n, agreed=lambda _d, _c: 0):
        v.run(6)
    assert v.batch_i == 5
