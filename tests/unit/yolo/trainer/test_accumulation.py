"""The optimizer's steps under Ultralytics' rule (8.4.190's `_do_train`): `ni = i + nb * epoch`,
`accumulate = max(round(nbs / batch), 1)` ramped by the warmup, a step when
`ni - last_opt_step >= accumulate`, `last_opt_step` -1 in every process, a resumed one too."""

from __future__ import annotations

import pytest
from rig.yolo.trainer import accumulation


def ultralytics_steps(
    acc: accumulation.Accumulation, nb: int, nominal: int, epochs: range, first: int = 0, warmup: int = 0
) -> list[int]:
    """The iterations Ultralytics' loop steps at, its `accumulate` read from `acc`."""
    steps: list[int] = []
    last_opt_step = -1  # the loop's local
    for epoch in epochs:
        for i in range(first if epoch == epochs[0] else 0, nb):
            ni = accumulation.iteration(epoch, i, nb)
            acc.nominal = max(1, round(1 + (nominal - 1) * ni / warmup)) if ni <= warmup else nominal
            if ni - last_opt_step >= acc.accumulate:
                steps.append(ni)
                acc.stepped(ni)
                last_opt_step = ni
    return steps


def nominal(nbs: int, batch: int) -> int:
    return max(round(nbs / batch), 1)


@pytest.mark.parametrize("stop_after", [0, 5, 7, 8, 23, 39])
def test_a_resume_continues_the_step_cadence_of_the_whole_run(stop_after: int) -> None:
    nb, acc0 = 10, nominal(64, 8)
    whole = ultralytics_steps(accumulation.Accumulation(), nb, acc0, range(4), warmup=15)
    saved = [s for s in whole if s <= stop_after]
    resumed = accumulation.Accumulation()
    resumed.resumed(saved[-1] if saved else -1)
    epoch, first = divmod(stop_after + 1, nb)
    rest = ultralytics_steps(resumed, nb, acc0, range(epoch, 4), first=first, warmup=15)
    assert saved + rest == whole


def test_a_restart_steps_at_once_then_every_accumulate() -> None:
    """A resume into another geometry: Ultralytics' numbering from -1, whatever was saved before."""
    acc = accumulation.Accumulation()
    acc.resumed(99)  # the saved run's last step, counted in batches of another size
    acc.restart()
    assert ultralytics_steps(acc, 10, nominal(64, 8), range(5, 7)) == [50, 58, 66]


def test_without_the_restart_a_resume_into_fewer_batches_waits_epochs_for_its_first_step() -> None:
    """What the restart is for: the saved step (99, from 20 batches an epoch) read against 10."""
    acc = accumulation.Accumulation()
    acc.resumed(99)
    assert ultralytics_steps(acc, 10, nominal(64, 8), range(5, 12))[0] == 107
