"""The per-rank trainer against fake Ultralytics trainers: world size, stops mid-epoch, resume."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


class _FakeUltralyticsTrainer:
    """What rig's trainer class relies on: world_size from `device`, callbacks, validate/final_eval."""

    def __init__(self, devices: int) -> None:
        self.world_size = devices
        self.device = "mps" if devices == 0 else "cuda:0"
        self.args = SimpleNamespace(workers=8)
        self.wdir = Path("weights")
        self.last, self.best = self.wdir / "last.pt", self.wdir / "best.pt"
        self.callbacks: list[str] = []
        self.metrics, self.fitness = {"m": 1.0}, 0.5

    def add_callback(self, event: str, _callback: Any) -> None:
        self.callbacks.append(event)

    def validate(self) -> str:
        return "validated"

    def final_eval(self) -> str:
        return "final"


def test_trainer_uses_the_global_world_size_and_skips_validation_when_stopping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rig.launch import trainer

    cls = trainer.rig_trainer_class(_FakeUltralyticsTrainer)
    monkeypatch.setenv("WORLD_SIZE", "8")  # 2 nodes x 4 GPUs; `device` lists this node's 4
    t = cls(4)
    assert t.world_size == 8 and "on_train_batch_end" in t.callbacks
    assert cls(1).world_size == 8  # one GPU per node is still DDP across the nodes
    assert cls(0).world_size == 0  # device=mps: one process, never DDP (CPU ranks are: test_wiring)
    monkeypatch.setenv("WORLD_SIZE", "1")
    t = cls(1)  # one rank: no final-validation agreement to reach (the image tests run it over gloo)
    assert t.world_size == 1
    t.validator = SimpleNamespace(callbacks={}, add_callback=lambda e, cb: None)
    monkeypatch.setattr(trainer.ultra, "engine_trainer", lambda: SimpleNamespace(strip_optimizer=None))
    assert t.validate() == "validated" and t.final_eval() == "final"
    t.rig_stopping = True  # the run ends at the stop's batch boundary: no validation, no final one
    assert t.validate() == ({"m": 1.0}, 0.5) and t.final_eval() is None
    # Values are typed by Ultralytics' smart_value (the image test checks it); names and paths stay text.
    assert trainer.parse_args(["epochs=3", "name=2024", "device=0"], smart_value=lambda v: ("typed", v)) == {
        "epochs": ("typed", "3"),
        "name": "2024",
        "device": "0",
    }


class _StepCadence:
    """Ultralytics 8.4.190's _do_train as far as the optimizer's steps go: ni = i + nb * epoch, the
    warmup sets `accumulate` from ni, a step when ni - last_opt_step >= accumulate, and last_opt_step
    starts at -1 in every process (a resumed one too)."""

    def __init__(self, nb: int, acc0: int, nw: int) -> None:
        self.world_size, self.nb, self.acc0, self.nw = 0, nb, acc0, nw
        self.device = "cpu"
        self.args = SimpleNamespace(seed=0, workers=0)
        self.wdir = Path("weights")
        self.last, self.best = self.wdir / "last.pt", self.wdir / "best.pt"
        self.loss_names = ("box",)
        self.train_loader = list(range(nb))
        self.accumulate = acc0
        self.steps: list[int] = []
        self.epoch = 0

    def add_callback(self, event: str, callback: Any) -> None:
        setattr(self, f"cb_{event}", callback)

    def optimizer_step(self) -> None:
        self.steps.append(self.rig_batch + self.nb * self.epoch)  # type: ignore[attr-defined]

    def run(self, epochs: int, start: tuple[int, int] = (0, 0), stop_at: int | None = None) -> None:
        last_opt_step = -1
        for epoch in range(start[0], epochs):
            self.epoch = epoch
            first = start[1] if epoch == start[0] else 0
            for i in range(first, self.nb):
                self.rig_batch = i
                self.cb_on_train_batch_start(self)  # type: ignore[attr-defined]
                ni = i + self.nb * epoch
                if ni <= self.nw:
                    self.accumulate = max(1, round(1 + (self.acc0 - 1) * ni / self.nw))
                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni
                if stop_at == ni:
                    return


@pytest.mark.parametrize("stop_at", [0, 3, 7, 8, 12, 19, 30])
def test_a_resumed_run_steps_the_optimizer_on_the_batches_the_uninterrupted_one_did(
    monkeypatch: pytest.MonkeyPatch, stop_at: int
) -> None:
    """Gradients accumulate over `nbs / batch` batches (8 here, fewer in the warmup): after a resume
    the first step comes where it would have come, not at the first batch (Ultralytics counts from -1)."""
    from rig.launch import trainer
    from rig.yolo import draws, resumable

    monkeypatch.setattr(draws, "seed_batch", lambda *_a: None)
    monkeypatch.setattr(resumable, "put_gradients", lambda *_a: None)
    cls = trainer.rig_trainer_class(_StepCadence)
    whole = cls(10, 8, 15)
    whole.run(4)
    stopped = cls(10, 8, 15)
    stopped.run(4, stop_at=stop_at)
    resumed = cls(10, 8, 15)
    last = stopped.steps[-1] if stopped.steps else -1
    resumed.rig_pending = resumable.Pending(
        done=stop_at % 10 + 1, last_opt_step=last, gradients={}, tloss=None
    )
    at = divmod(stop_at + 1, 10)
    resumed.run(4, start=at)
    assert stopped.steps + resumed.steps == whole.steps


def test_exit_code_follows_the_agreed_stop_not_the_local_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank of a stopped run exits 128 + the agreed signal, whichever rank got it; a run that
    finished exits 0 even when a signal came after its last stop check (there is nothing to resume)."""
    from rig.launch import trainer

    stopped = SimpleNamespace(rig_stop_signal=15, last=Path("last.pt"), epoch=1, epochs=3)
    finished = SimpleNamespace(rig_stop_signal=0, last=Path("last.pt"))  # Ultralytics ran every epoch
    monkeypatch.setattr(trainer.STOP, "signum", 0)
    assert trainer._exit_code(stopped, rank=1) == 143  # this rank got no signal itself
    assert trainer._exit_code(finished, rank=0) == 0
    monkeypatch.setattr(trainer.STOP, "signum", 15)  # a signal after the last check of the last epoch
    assert trainer._exit_code(finished, rank=0) == 0
    assert trainer._exit_code(stopped, rank=0) == 143


def test_the_closing_hint_names_rigs_resume_first_then_what_stock_ultralytics_does() -> None:
    from rig.launch import trainer

    rig = "continue exactly where it stopped with the same `rig train` command and resume=auto"
    stock = "; stock Ultralytics' `yolo train resume=True model=w/last.pt`"
    first = trainer.resume_hint(Path("w/last.pt"), 0, 3)
    assert first.startswith(rig) and "(or `rig train resume=True model=w/last.pt`)" in first
    assert first.endswith(f"{stock} continues at epoch 2 (the rest of epoch 1 is not trained)")
    only = trainer.resume_hint(Path("w/last.pt"), 0, 1)
    assert only.startswith(rig) and only.endswith(f"{stock} takes this 1-epoch run as finished")
    later = trainer.resume_hint(Path("w/last.pt"), 4, 10)
    assert later.startswith(rig) and later.endswith(f"{stock} reruns epoch 5 from its start")


def test_a_checkpoint_of_another_ultralytics_is_one_warning_and_one_it_cannot_load_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rig.errors import RigError
    from rig.launch import trainer

    assert trainer.other_version({"version": "8.4.190"}, "8.4.190") is None
    assert trainer.other_version({}, "8.4.158") is None and trainer.other_version(None, "8.4.158") is None
    said = trainer.other_version({"version": "8.4.190"}, "8.4.158")
    assert said and said.startswith("written by Ultralytics 8.4.190, resumed with 8.4.158")

    def unpickle(_path: str) -> Any:
        raise AttributeError("Can't get attribute 'C3k2Attn' on <module 'ultralytics.nn.tasks'>\nmore")

    monkeypatch.setattr(trainer.ultra, "yolo", unpickle)
    with pytest.raises(RigError) as e:
        trainer._load("w/last.pt", "8.4.158")
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert str(e.value).startswith("w/last.pt: Ultralytics 8.4.158 cannot load it (AttributeError: Can't get")
