"""The agreed stop as the trainer keeps it, and early stopping frozen for a partial epoch."""

from __future__ import annotations

from types import SimpleNamespace

from rig.yolo.trainer import stops


def test_an_agreed_stop_records_its_signal() -> None:
    stop = stops.Stop()
    assert not stop.stopping and stop.signal == 0 and not stop.saved
    stop.agreed(15)
    assert stop.stopping and stop.signal == 15


def test_a_frozen_stopper_judges_nothing_and_keeps_its_best() -> None:
    stopper = SimpleNamespace(best_fitness=0.7, best_epoch=3)
    frozen = stops.FrozenStopper(stopper)
    assert frozen(9, 0.9) is False and stopper.best_epoch == 3
    assert frozen.best_fitness == 0.7 and frozen.best_epoch == 3
    assert stops.FrozenStopper(frozen).rig_stopper is stopper  # frozen twice is frozen once
