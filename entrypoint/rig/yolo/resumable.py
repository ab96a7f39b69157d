"""Checkpoints that continue a run exactly where it was saved: at an epoch's end, or inside an epoch.

Ultralytics' checkpoint (its save_model) keeps the EMA and the optimizer's state in half precision,
no trained weights (`"model": None`) and no position in the epoch; its resume starts the model again
from that fp16 EMA at the next epoch's first batch. So even an epoch-end resume changes the run, and
a stop inside an epoch loses it. rig's checkpoints are Ultralytics' own, written by its save_model
(rig.yolo.trainer.saves), with rig's keys added under `RESUME_KEY` (`state`):
- the model's own weights, the EMA and the optimizer's state as training has them (fp32);
- the position (the epoch to train next and its batches already trained), the step the optimizer
  last took and the gradients accumulated since (Ultralytics steps every `nbs / batch` batches) with
  the AMP scale they were accumulated under, and the epoch's running loss.
The random draws need nothing saved (rig.yolo.draws): the epoch and the batch decide them. The
learning rate and warmup follow from the iteration count, as in Ultralytics' loop; early stopping,
the best fitness, the EMA's updates and the AMP scaler are Ultralytics' own keys.

Ultralytics' `epoch` key says where stock Ultralytics resumes (`yolo train resume=True
model=last.pt`, in the run's own folder, at the epoch after it). From the second epoch on it is the
last whole epoch, so stock Ultralytics reruns the interrupted epoch from its start. Stock
Ultralytics never resumes at the first epoch (it takes a key below 0 for "nothing to resume": a new
run in a new folder, or an error), so a checkpoint of the first epoch says 0: stock Ultralytics
continues at the second epoch from the weights saved at the stop, and the rest of the first epoch is
not trained. rig reads its own position (`position`), never this key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from rig.yolo import contract, ultra

RESUME_KEY = "rig_resume"


class RigCheckpoint(contract.Checkpoint, total=False):
    """Ultralytics' checkpoint with rig's key."""

    rig_resume: dict[str, Any]


FORMAT = 2  # Ultralytics' keys as its save_model writes them; rig's fp32 EMA and optimizer in RESUME_KEY
FORMATS = (1, 2)  # 1: Ultralytics' keys held the fp32 EMA and optimizer (rig 0.2.0)


@dataclass(frozen=True)
class Position:
    """Where a checkpoint continues: `epoch` (0-based) from its batch `done` (0: its start; `batches`:
    trained, its validation not yet run). `saved`: when it was written (seconds since the epoch)."""

    epoch: int
    done: int
    batches: int
    saved: float = 0.0

    @property
    def mid_epoch(self) -> bool:
        return self.done > 0

    def describe(self, epochs: int) -> str:
        if not self.done:
            return f"epoch {self.epoch + 1}/{epochs} from its start"
        if self.done >= self.batches:
            return f"epoch {self.epoch + 1}/{epochs} trained, its validation next"
        return f"epoch {self.epoch + 1}/{epochs} at batch {self.done + 1}/{self.batches}"


def position(ckpt: Mapping[str, Any] | None) -> Position | None:
    """The position a rig checkpoint continues from; None for another (stock, stripped) checkpoint."""
    state = (ckpt or {}).get(RESUME_KEY)
    if not isinstance(state, Mapping) or state.get("format") not in FORMATS:
        return None
    return Position(
        int(state["epoch"]), int(state["done"]), int(state["batches"]), float(state.get("saved", 0.0))
    )


def _unwrapped(trainer: contract.Trainer) -> Any:
    return ultra.torch_utils().unwrap_model(trainer.model)


def _gradients(model: Any) -> dict[str, Any]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _fp32(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state_dict's tensors copied, as training has them (the EMA's: fp32)."""
    return {k: v.detach().clone() if hasattr(v, "detach") else v for k, v in state.items()}


def scale_of(scaler: Any) -> float:
    """The AMP scaler's scale (what backward multiplied the loss by); 1.0 when disabled or absent."""
    if scaler is None or not scaler.is_enabled():
        return 1.0
    return float(scaler.get_scale())


def stock_epoch(epoch: int) -> int:
    """Ultralytics' `epoch` key of a checkpoint continuing in `epoch` (0-based): the last whole epoch,
    and 0 inside the first (see the module's doc)."""
    return max(epoch - 1, 0)


def state(
    trainer: contract.Trainer, epoch: int, done: int, last_opt_step: int, tloss: Any, *, model: Any = None
) -> dict[str, Any]:
    """rig's keys of a checkpoint of the trainer now, to continue at batch `done` of `epoch`.

    last_opt_step: the iteration (epoch * batches + batch) of the optimizer's last step; the
    gradients accumulated since are kept when it was before the last batch trained. model: the
    trainer's model unwrapped (from compile and DDP), found here when not given."""
    batches = len(trainer.train_loader)
    trained = epoch * batches + done - 1  # the iteration of the last batch trained
    model = model if model is not None else _unwrapped(trainer)
    return {
        "format": FORMAT,
        "epoch": epoch,
        "done": done,
        "batches": batches,
        "saved": time.time(),
        "model": _fp32(model.state_dict()),
        "ema": _fp32(trainer.ema.ema.state_dict()),
        "optimizer": trainer.optimizer.state_dict(),
        "last_opt_step": last_opt_step,
        "gradients": _gradients(model) if last_opt_step < trained else {},
        # The scale the gradients were accumulated under (AMP's; 1.0 without): another scaler
        # (a CPU checkpoint resumed on a GPU, or back) scales them by the ratio.
        "grad_scale": scale_of(trainer.scaler),
        "tloss": tloss,
        # What the loop learns at a run's first batch: a resumed epoch with no batch left validates.
        "loss_names": list(trainer.loss_names or ()),
        "loss_items": trainer.loss_items,
        "loss": trainer.loss,
        # The learning rates of the last batch (the warmup's): what the epoch's row records.
        "lr": [group["lr"] for group in trainer.optimizer.param_groups],
    }


@dataclass
class Pending:
    """What the first batch after a resume puts back (Ultralytics' loop clears it at the epoch's start)."""

    done: int
    last_opt_step: int
    gradients: dict[str, Any]
    tloss: Any
    loss_names: tuple[str, ...] = ()
    loss_items: Any = None
    loss: Any = None
    batches: int = 0  # the epoch's batches per rank when saved
    lr: tuple[float, ...] = ()
    grad_scale: float | None = None  # the AMP scale `gradients` were accumulated under; None: unknown


def restore(trainer: contract.Trainer, ckpt: contract.Checkpoint) -> Pending:
    """The model's own weights back (Ultralytics' resume loaded the optimizer, scaler, EMA, best
    fitness and early stopping from its keys); what the first resumed batch puts back."""
    state = cast(RigCheckpoint, ckpt)["rig_resume"]
    model = _unwrapped(trainer)
    model.load_state_dict(state["model"])
    if state.get("ema") is not None:  # fp32, where Ultralytics' own key holds it in fp16
        trainer.ema.ema.load_state_dict(state["ema"])
    if state.get("optimizer") is not None:
        optimizer = trainer.optimizer
        saved = state["optimizer"]
        for group, now in zip(saved["param_groups"], optimizer.param_groups, strict=False):
            for kernel in ("fused", "foreach"):  # this run's choice, as Ultralytics' resume has it
                if kernel in now:
                    group[kernel] = now[kernel]
        optimizer.load_state_dict(saved)
    if getattr(model, "criterion", None) is None and hasattr(model, "init_criterion"):
        model.criterion = model.init_criterion()  # made by the first batch, which a resume may not have
    return Pending(
        done=int(state["done"]),
        last_opt_step=int(state["last_opt_step"]),
        gradients=dict(state.get("gradients") or {}),
        tloss=state.get("tloss"),
        loss_names=tuple(state.get("loss_names") or ()),
        loss_items=state.get("loss_items"),
        loss=state.get("loss"),
        batches=int(state["batches"]),
        lr=tuple(state.get("lr") or ()),
        grad_scale=None if state.get("grad_scale") is None else float(state["grad_scale"]),
    )


def put_gradients(trainer: contract.Trainer, gradients: Mapping[str, Any]) -> None:
    model = _unwrapped(trainer)
    for name, p in model.named_parameters():
        if name in gradients:
            p.grad = gradients[name].to(device=p.device, dtype=p.dtype)
