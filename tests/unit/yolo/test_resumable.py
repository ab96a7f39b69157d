"""Where a checkpoint continues, read from it; what the resumable state holds (its torch parts, the
EMA copy and the weights, are the image tests')."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from rig.yolo import resumable


def test_position_is_read_from_rigs_key_only() -> None:
    state = {"format": resumable.FORMAT, "epoch": 2, "done": 7, "batches": 16, "saved": 12.5}
    where = resumable.position({"epoch": 1, resumable.RESUME_KEY: state})
    assert where == resumable.Position(2, 7, 16, 12.5) and where.mid_epoch
    assert resumable.position({"epoch": 1}) is None  # Ultralytics' own checkpoint
    assert resumable.position({resumable.RESUME_KEY: None}) is None  # stripped at the end of training
    assert resumable.position({resumable.RESUME_KEY: {**state, "format": 99}}) is None  # another rig's
    old = resumable.position(
        {resumable.RESUME_KEY: {**state, "format": 1}}
    )  # rig 0.2.0's: fp32 in Ultralytics' keys
    assert old == resumable.Position(2, 7, 16, 12.5)
    assert resumable.position(None) is None


def test_a_position_says_what_resume_does() -> None:
    assert resumable.Position(2, 7, 16).describe(10) == "epoch 3/10 at batch 8/16"
    assert resumable.Position(2, 16, 16).describe(10) == "epoch 3/10 trained, its validation next"
    assert resumable.Position(3, 0, 16).describe(10) == "epoch 4/10 from its start"
    assert not resumable.Position(3, 0, 16).mid_epoch


class _Grad:
    def detach(self) -> _Grad:
        return self

    def clone(self) -> str:
        return "grad"


class _Model:
    def state_dict(self) -> dict[str, str]:
        return {"w": "weights"}

    def named_parameters(self) -> list[tuple[str, object]]:
        return [("w", SimpleNamespace(grad=_Grad())), ("frozen", SimpleNamespace(grad=None))]


def _trainer(scaler_enabled: bool) -> SimpleNamespace:
    scaler = SimpleNamespace(is_enabled=lambda: scaler_enabled, get_scale=lambda: 1024.0)
    return SimpleNamespace(
        train_loader=[0] * 10,
        ema=SimpleNamespace(updates=42, ema=SimpleNamespace(state_dict=lambda: {"w": "ema weights"})),
        optimizer=SimpleNamespace(state_dict=lambda: {"state": {}}, param_groups=[{"lr": 0.01}]),
        scaler=scaler,
        loss_names=("box",),
        loss_items=None,
        loss=None,
    )


def _checkpoint(trainer: SimpleNamespace, done: int, last_opt_step: int, epoch: int = 2) -> dict[str, Any]:
    """Ultralytics' checkpoint (the keys stock resume reads) as rig's save leaves it: its `epoch` set,
    rig's keys added (rig.yolo.trainer.saves)."""
    rig = resumable.state(trainer, epoch, done, last_opt_step, None, model=_Model())  # type: ignore[arg-type]
    return {"epoch": resumable.stock_epoch(epoch), "optimizer": {"fp16": True}, resumable.RESUME_KEY: rig}


def test_the_saved_state_holds_the_scale_its_gradients_were_accumulated_under() -> None:
    on_gpu = _checkpoint(_trainer(scaler_enabled=True), done=5, last_opt_step=20)
    state = on_gpu[resumable.RESUME_KEY]
    assert state["grad_scale"] == 1024.0 and state["gradients"] == {"w": "grad"}
    assert (state["epoch"], state["done"], state["batches"], state["last_opt_step"]) == (2, 5, 10, 20)
    assert state["ema"] == {"w": "ema weights"} and state["model"] == {"w": "weights"}  # fp32, as trained
    assert on_gpu["epoch"] == 1  # Ultralytics': the last whole epoch
    on_cpu = _checkpoint(_trainer(scaler_enabled=False), done=5, last_opt_step=20)
    assert on_cpu[resumable.RESUME_KEY]["grad_scale"] == 1.0


def test_gradients_are_kept_only_when_batches_were_trained_since_the_last_step() -> None:
    stepped = _checkpoint(_trainer(scaler_enabled=False), done=5, last_opt_step=24)  # 2 * 10 + 5 - 1
    assert stepped[resumable.RESUME_KEY]["gradients"] == {}


def _stock_start(ckpt: dict[str, Any], epochs: int) -> int | None:
    """Where stock Ultralytics 8.4 resumes a checkpoint (Model.train, BaseTrainer.resume_training):
    at its `epoch` key + 1; None where it does not (a new run in a new folder, or "nothing to
    resume")."""
    if ckpt["epoch"] < 0 or ckpt["optimizer"] is None:
        return None
    start = ckpt["epoch"] + 1
    return start if 0 < start < epochs else None


@pytest.mark.parametrize(
    ("epoch", "done", "stock"),
    [
        (0, 5, 1),  # inside the first epoch: stock continues at the second (its rest is not trained)
        (0, 10, 1),  # the first epoch trained, its validation next
        (1, 0, 1),  # the first epoch's end
        (1, 5, 1),  # inside the second: stock reruns it from its start
        (2, 5, 2),
        (2, 0, 2),
    ],
)
def test_stock_ultralytics_resumes_every_checkpoint_and_rig_its_own_position(
    epoch: int, done: int, stock: int
) -> None:
    ckpt = _checkpoint(_trainer(scaler_enabled=False), done=done, last_opt_step=-1, epoch=epoch)
    assert _stock_start(ckpt, epochs=3) == stock
    where = resumable.position(ckpt)
    assert where is not None and (where.epoch, where.done) == (epoch, done)
