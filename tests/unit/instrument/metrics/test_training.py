"""rig.instrument.metrics.training: the decisions behind the training gauges (progress, ETA, images)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from rig.instrument.metrics import training


# ------------------------------------------------------------------------------------ the decisions
@pytest.mark.parametrize(
    ("args", "ratio", "eta"),
    [
        ((0, 0, 10, 4, 0, 0.0), 0.0, None),
        ((0, 5, 10, 4, 0, 30.0), 0.125, 210.0),  # half an epoch in 30 s: 3.5 epochs left at 60 s
        ((3, 10, 10, 4, 0, 240.0), 1.0, 0.0),
        ((2, 5, 10, 4, 2, 30.0), 0.625, 90.0),  # resumed at epoch 3: its pace is this session's
        ((9, 10, 10, 4, 0, 1.0), 1.0, 0.0),  # epochs shrunk by time=: never above 1, never negative
    ],
)
def test_progress_and_eta(
    args: tuple[int, int, int, int, int, float], ratio: float, eta: float | None
) -> None:
    p = training.progress(*args)
    assert p.ratio == pytest.approx(ratio)
    assert p.eta_s == (None if eta is None else pytest.approx(eta))


def test_the_last_batch_of_a_shard_counts_what_is_left() -> None:
    assert [training.images_in_batch(4, 10, seen) for seen in (0, 4, 8)] == [4, 4, 2]
    assert training.images_in_batch(4, None, 8) == 4


def test_a_callback_that_raises_is_one_line_then_quiet(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def on_train_batch_end(trainer: Any) -> None:
        calls.append(1)
        raise ValueError("a gauge went wrong")

    guarded = training._guarded(on_train_batch_end)
    trainer: Any = SimpleNamespace()
    with caplog.at_level(logging.INFO, logger="rig.metrics"):
        for _ in range(3):
            guarded(trainer)  # the run goes on: nothing raised
    assert calls == [1]
    assert caplog.messages == ["on_train_batch_end failed (ValueError: a gauge went wrong); the run goes on"]
