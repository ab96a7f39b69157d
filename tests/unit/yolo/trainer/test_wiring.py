"""The parts wired into the trainer class, against a fake Ultralytics trainer whose loop is
8.4.190's as far as steps, callbacks and checkpoints go, and a fake rank."""

from __future__ import annotations

import errno
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rig.yolo import draws, resumable
from rig.yolo import trainer as yolo_trainer

from tests.unit.yolo.trainer.test_resume import FakeTensor


class _Rank:
    """One rank, the first; writes through `write`; a stop never agreed; every feature on."""

    def __init__(self, every: float = 0.0, write: Any = None) -> None:
        self.every, self.written = every, write or (lambda _path, _data: None)

    def world_size(self) -> int:
        return 1

    def index(self) -> int:
        return 0

    def is_first(self) -> bool:
        return True

    def agreed_stop(self, _trainer: Any) -> int:
        return 0

    def checkpoint_every(self) -> float:
        return self.every

    def named(self, loaded: str) -> str:
        return loaded

    def feature_on(self, _feature: Any) -> bool:
        return True

    def write(self, path: Any, data: Any) -> None:
        self.written(path, data)

    def cpu_setup_train(self) -> Any:
        return nullcontext()


class _Loop:
    """Ultralytics' loop: `ni = i + nb * epoch`, a step when `ni - last_opt_step >= accumulate`
    (last_opt_step -1 in every process), its callbacks at the epoch's and each batch's start and end."""

    def __init__(self, nb: int, acc0: int, device: str = "cpu") -> None:
        self.world_size, self.device, self.nb = 0, device, nb
        self.args = SimpleNamespace(seed=0, model="last.pt", workers=2)
        self.wdir = Path("weights")
        self.last, self.best = self.wdir / "last.pt", self.wdir / "best.pt"
        self.train_loader = list(range(nb))
        self.accumulate = acc0
        self.steps: list[int] = []
        self.epoch, self.epochs, self.stop = 0, 10, False
        self.loss_names: tuple[str, ...] = ()
        self.tloss: Any = None
        self.callbacks: dict[str, Any] = {}

    def add_callback(self, event: str, callback: Any) -> None:
        self.callbacks[event] = callback

    def optimizer_step(self) -> None:
        self.steps.append(self.rig_batch + self.nb * self.epoch)  # type: ignore[attr-defined]

    def save_model(self) -> bool:
        self.last.write_bytes(b"Ultralytics' checkpoint")  # as its save_model writes
        return True

    def run(self, epochs: range) -> None:
        last_opt_step = -1
        for self.epoch in epochs:
            self.callbacks["on_train_epoch_start"](self)
            for i, _batch in self.rig_numbering.enumerate(self.train_loader):  # type: ignore[attr-defined]
                self.callbacks["on_train_batch_start"](self)
                ni = i + self.nb * self.epoch
                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni
                self.callbacks["on_train_batch_end"](self)


@pytest.fixture(autouse=True)
def _no_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(draws, "seed_batch", lambda *_a: None)
    monkeypatch.setattr(resumable, "put_gradients", lambda *_a: None)


def _resumed(nb: int, saved_batches: int, done: int, last: int, **kw: Any) -> Any:
    t = yolo_trainer.for_task(_Loop, _Rank(**kw))(nb, 8)
    t.rig_pending = resumable.Pending(
        done=done, last_opt_step=last, gradients={}, tloss=None, batches=saved_batches
    )
    return t


@pytest.mark.parametrize("done", [0, 7])
def test_a_resume_with_the_batch_doubled_steps_at_once_with_one_warning(done: int, logged: Any) -> None:
    """Saved at 20 batches an epoch, resumed at 10 (batch doubled): Ultralytics' rule from -1 (a step
    at the first batch, then every `accumulate` = nbs / batch), not 5 epochs without a step."""
    t = _resumed(10, 20, done, last=99)
    t.run(range(5, 7))
    assert t.steps == [50, 58, 66]
    assert len(logged.warnings()) == 1 and "20 batches per rank; this run has 10" in logged.warnings()[0]


def test_a_resume_in_the_same_geometry_keeps_the_cadence(logged: Any) -> None:
    t = _resumed(10, 10, 3, last=51)
    t.run(range(5, 7))
    assert t.steps == [59, 67] and not logged.warnings()


def test_the_running_loss_and_loss_items_come_back_on_the_training_device() -> None:
    """Ultralytics loads checkpoints onto the CPU; the validator adds device tensors into them."""
    t = _resumed(10, 10, 10, last=49)
    t.device = "cuda:0"
    assert t.rig_pending is not None
    t.rig_pending.tloss = {"box": FakeTensor(1.0)}
    t.rig_pending.loss_names = ("box",)
    t.rig_pending.loss_items, t.rig_pending.loss = FakeTensor(2.0), FakeTensor(3.0)
    t.optimizer = SimpleNamespace(param_groups=[])
    t.metrics = None
    t.run(range(4, 5))  # the epoch was trained: no batch left, its validation next
    assert t.tloss["box"].device == "cuda:0"
    assert (t.loss_items.device, t.loss.device) == ("cuda:0", "cuda:0")


def test_a_periodic_checkpoint_that_cannot_be_written_warns_once_and_training_goes_on(
    monkeypatch: pytest.MonkeyPatch, logged: Any
) -> None:
    def full(_path: Any, _data: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    t = yolo_trainer.for_task(_Loop, _Rank(every=3600.0, write=full))(10, 8)
    t.rig_saves.last = -1e9  # a period has passed: the first batch's end saves
    t.run(range(2))
    assert t.steps == [7, 15] and (t.epoch, t.rig_batch) == (1, 9)  # all 20 batches trained
    assert len(logged.warnings()) == 1 and "No space left on device" in logged.warnings()[0]


class _Scaler:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def is_enabled(self) -> bool:
        return self.enabled

    def get_scale(self) -> float:
        return 65536.0


@pytest.mark.parametrize(("saved", "enabled", "factor"), [(1.0, True, 65536.0), (65536.0, False, 1 / 65536)])
def test_accumulated_gradients_are_put_back_under_this_runs_scale(
    monkeypatch: pytest.MonkeyPatch, saved: float, enabled: bool, factor: float
) -> None:
    """A CPU checkpoint (no AMP: scale 1) resumed on a GPU (AMP: 65536), and back."""
    put: list[Any] = []
    monkeypatch.setattr(resumable, "put_gradients", lambda _t, grads: put.append(grads))
    t = _resumed(10, 10, 3, last=49)
    assert t.rig_pending is not None
    t.rig_pending.gradients, t.rig_pending.grad_scale = {"w": FakeTensor(2.0)}, saved
    t.scaler = _Scaler(enabled)
    t.run(range(5, 6))
    assert put[0]["w"].value == 2.0 * factor


def test_a_checkpoint_without_a_saved_scale_puts_its_gradients_back_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    put: list[Any] = []
    monkeypatch.setattr(resumable, "put_gradients", lambda _t, grads: put.append(grads))
    t = _resumed(10, 10, 3, last=49)
    assert t.rig_pending is not None
    t.rig_pending.gradients = {"w": FakeTensor(2.0)}
    t.scaler = _Scaler(True)
    t.run(range(5, 6))
    assert put[0]["w"].value == 2.0


def test_the_launch_rank_drives_the_same_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """rig.launch.rankside's rank drives the loop as the fake rank does."""
    from rig.launch import rankside
    from rig.launch import trainer as launch_trainer

    monkeypatch.setattr(rankside.LaunchRank, "distributed", lambda _self: False)  # one process, no torch
    t = launch_trainer.rig_trainer_class(_Loop)(10, 8)
    t.rig_saves.started()  # what _do_train does: no periodic checkpoint due before 15 minutes
    t.run(range(2))
    assert t.steps == [7, 15] and (t.epoch, t.rig_batch) == (1, 9)
