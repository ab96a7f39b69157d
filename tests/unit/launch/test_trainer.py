"""The per-rank trainer against fake Ultralytics trainers: world size, stops mid-epoch, resume."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


class _FakeUltralyticsTrainer:
    """What rig's trainer class relies on: world_size from `device`, callbacks, validate/final_eval."""

    def __init__(self, devices: int) -> None:
        self.world_size = devices
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
    assert t.world_size == 8 and t.callbacks == ["on_train_batch_end"]
    assert cls(1).world_size == 8  # one GPU per node is still DDP across the nodes
    assert cls(0).world_size == 0  # device=cpu: Ultralytics never runs DDP on the CPU
    monkeypatch.setenv("WORLD_SIZE", "1")
    t = cls(1)  # one rank: no final-validation agreement to reach (the image tests run it over gloo)
    assert t.world_size == 1
    assert t.validate() == "validated" and t.final_eval() == "final"
    t.rig_stopping = True  # a SIGTERM grace period has no room for a validation pass
    assert t.validate() == ({"m": 1.0}, 0.5) and t.final_eval() is None
    # Values are typed by Ultralytics' smart_value (the image test checks it); names and paths stay text.
    assert trainer.parse_args(["epochs=3", "name=2024", "device=0"], smart_value=lambda v: ("typed", v)) == {
        "epochs": ("typed", "3"),
        "name": "2024",
        "device": "0",
    }


class _FakeCheckpointingTrainer:
    """Ultralytics 8.4.190 BaseTrainer's epoch end, checkpoints and resume, with pickle for torch."""

    def __init__(self, wdir: Path, epochs: int, resume: bool = False) -> None:
        self.world_size, self.resume, self.epochs = 0, resume, epochs
        self.args = SimpleNamespace(model=str(wdir / "last.pt"))
        self.wdir, self.last, self.best = wdir, wdir / "last.pt", wdir / "best.pt"
        self.csv = wdir / "results.csv"
        self.epoch = self.start_epoch = 0
        self.save_period = 1
        self.metrics: dict[str, float] = {"mAP": 0.0}  # _setup_train's zeros on rank 0
        self.fitness: float | None = None
        self.best_fitness: float | None = None
        self.stop = False

    def add_callback(self, event: str, _callback: Any) -> None:
        pass

    def validate(self) -> tuple[dict[str, float], float]:
        fitness = 0.1 * (self.epoch + 1)
        if self.best_fitness is None or self.best_fitness < fitness:
            self.best_fitness = fitness
        return {"mAP": fitness}, fitness

    def save_metrics(self, metrics: dict[str, float]) -> None:
        with self.csv.open("a") as f:
            f.write(f"{self.epoch + 1},{metrics['mAP']}\n")

    def save_model(self) -> bool:
        ckpt = {"epoch": self.epoch, "best_fitness": self.best_fitness}
        blob = pickle.dumps({**ckpt, "train_metrics": {**self.metrics, "fitness": self.fitness}})
        self.last.write_bytes(blob)
        if self.best_fitness == self.fitness:
            self.best.write_bytes(blob)
        if (self.save_period > 0) and (self.epoch % self.save_period == 0):
            (self.wdir / f"epoch{self.epoch}.pt").write_bytes(blob)
        return True

    def _load_checkpoint_state(self, ckpt: dict[str, Any]) -> None:
        self.best_fitness = ckpt["best_fitness"]

    def resume_training(self, ckpt: dict[str, Any] | None) -> None:
        if ckpt is None or not self.resume:
            return
        start_epoch = ckpt.get("epoch", -1) + 1
        assert 0 < start_epoch < self.epochs, "nothing to resume"
        self._load_checkpoint_state(ckpt)
        self.start_epoch = start_epoch

    def fit(self, stop_in: int | None = None) -> None:
        """_do_train on rank 0, rig's batch-end callback setting the stop flag in epoch stop_in."""
        self.resume_training(pickle.loads(self.last.read_bytes()) if self.resume else None)
        for epoch in range(self.start_epoch, self.epochs):
            self.epoch = epoch
            if epoch == stop_in:
                self.stop = self.rig_stopping = True
            self.metrics, self.fitness = self.validate()
            self.save_metrics(metrics={**self.metrics})
            self.save_model()
            if self.stop:
                return


def _ckpt(path: Path) -> dict[str, Any]:
    ckpt: dict[str, Any] = pickle.loads(path.read_bytes())
    return ckpt


def _results_epochs(wdir: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in (wdir / "results.csv").read_text().splitlines()]


@pytest.mark.parametrize(("epochs", "stop_in"), [(3, 0), (3, 1), (3, 2), (1, 0)])
def test_a_stop_mid_epoch_keeps_nothing_of_it_and_resume_runs_it_again(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    epochs: int,
    stop_in: int,
) -> None:
    from rig.launch import trainer

    monkeypatch.delenv("RANK", raising=False)

    cls = trainer.rig_trainer_class(_FakeCheckpointingTrainer)
    t = cls(tmp_path, epochs)
    t.fit(stop_in=stop_in)
    last = _ckpt(tmp_path / "last.pt")
    assert last["epoch"] == stop_in - 1 and trainer.stopped_mid_epoch(last)
    assert (tmp_path / "results.csv").exists() == (stop_in > 0)
    assert stop_in == 0 or _results_epochs(tmp_path) == list(range(1, stop_in + 1))
    assert sorted(p.name for p in tmp_path.glob("epoch*.pt")) == [f"epoch{e}.pt" for e in range(stop_in)]
    if stop_in == 0:
        assert not (tmp_path / "best.pt").exists()  # None == None: Ultralytics would call it the best
    else:
        best = _ckpt(tmp_path / "best.pt")
        assert best["epoch"] == stop_in - 1 and not trainer.stopped_mid_epoch(best)
    assert (t.epoch, t.best, t.save_period, list(t.metrics)) == (stop_in, tmp_path / "best.pt", 1, ["mAP"])

    caplog.set_level(logging.INFO, logger="rig")
    resumed = cls(tmp_path, epochs, resume=True)
    resumed.fit()
    assert resumed.start_epoch == stop_in
    assert [r.getMessage() for r in caplog.records if r.name == "rig.trainer"] == [
        f"{tmp_path / 'last.pt'} was saved by a stop mid-epoch: running epoch {stop_in + 1}/{epochs} again"
    ]
    assert _results_epochs(tmp_path) == list(range(1, epochs + 1))
    assert _ckpt(tmp_path / "last.pt")["epoch"] == epochs - 1
    assert not trainer.stopped_mid_epoch(_ckpt(tmp_path / "last.pt"))


def test_resume_of_other_checkpoints_is_ultralytics_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rig.launch import trainer

    caplog.set_level(logging.INFO, logger="rig")
    cls = trainer.rig_trainer_class(_FakeCheckpointingTrainer)
    cls(tmp_path, 3).fit()
    assert not trainer.stopped_mid_epoch(_ckpt(tmp_path / "last.pt"))
    with pytest.raises(AssertionError, match="nothing to resume"):
        cls(tmp_path, 3, resume=True).fit()  # finished
    (tmp_path / "last.pt").write_bytes(pickle.dumps({"epoch": -1, "best_fitness": 0.3, "train_metrics": {}}))
    with pytest.raises(AssertionError, match="nothing to resume"):
        cls(tmp_path, 3, resume=True).fit()  # stripped by final_eval: epoch -1, but not a stop's
    (tmp_path / "last.pt").write_bytes(pickle.dumps({"epoch": 0, "best_fitness": 0.1, "train_metrics": {}}))
    resumed = cls(tmp_path, 3, resume=True)
    resumed.fit()
    assert resumed.start_epoch == 1
    assert not [r for r in caplog.records if r.name == "rig.trainer"]


def test_exit_code_follows_the_agreed_stop_not_the_local_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rank of a stopped run exits 128 + the agreed signal, whichever rank got it; a run that
    finished exits 0 even when a signal came after its last stop check (there is nothing to resume)."""
    from rig.launch import trainer

    stopped = SimpleNamespace(rig_stop_signal=15, last=Path("last.pt"))
    finished = SimpleNamespace(last=Path("last.pt"))  # no stop agreed: Ultralytics ran every epoch
    monkeypatch.setattr(trainer.STOP, "signum", 0)
    assert trainer._exit_code(stopped, rank=1) == 143  # this rank got no signal itself
    assert trainer._exit_code(finished, rank=0) == 0
    monkeypatch.setattr(trainer.STOP, "signum", 15)  # a signal after the last check of the last epoch
    assert trainer._exit_code(finished, rank=0) == 0
    assert trainer._exit_code(stopped, rank=0) == 143
