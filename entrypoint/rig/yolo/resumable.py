"""Checkpoints that continue a run exactly where it was saved: at an epoch's end, or inside an epoch.

Ultralytics 8.4.190's checkpoint keeps the EMA in half precision, the optimizer's state in half
precision, no trained weights (`"model": None`) and no position in the epoch; its resume starts the
model again from that fp16 EMA at the next epoch's first batch. So even an epoch-end resume changes
the run, and a stop inside an epoch loses it. rig's checkpoints are still Ultralytics' (every key of
its `save_model`, loadable by stock Ultralytics: `YOLO("last.pt")`, `yolo train resume`), with:
- the EMA and the optimizer's state as training has them (fp32);
- under `RESUME_KEY`: the model's own weights (fp32), the position (the epoch to train next and
  its batches already trained), the step the optimizer last took and the gradients accumulated since
  (Ultralytics steps every `nbs / batch` batches) with the AMP scale they were accumulated under,
  and the epoch's running loss.
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

import copy
import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rig.yolo import ultra

RESUME_KEY = "rig_resume"
FORMAT = 1


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
    if not isinstance(state, Mapping) or state.get("format") != FORMAT:
        return None
    return Position(
        int(state["epoch"]), int(state["done"]), int(state["batches"]), float(state.get("saved", 0.0))
    )


def _torch_utils() -> Any:
    return ultra.module("utils.torch_utils")


def _gradients(model: Any) -> dict[str, Any]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def _ema_copy(trainer: Any) -> tuple[Any, Any]:
    """The EMA as Ultralytics' save_model prepares it, left in fp32, and its QAT state."""
    torch: Any = importlib.import_module("torch")
    tu = _torch_utils()
    ema = trainer.ema.ema
    # Ultralytics' own rule: a non-finite EMA tensor is taken again from the live model.
    if not all(torch.isfinite(v).all() for v in ema.state_dict().values() if isinstance(v, torch.Tensor)):
        model_sd = tu.unwrap_model(trainer.model).state_dict()
        for k, v in ema.state_dict().items():
            if (
                isinstance(v, torch.Tensor)
                and not torch.isfinite(v).all()
                and torch.isfinite(model_sd[k]).all()
            ):
                v.copy_(model_sd[k])
    modelopt = tu.qat_state(ema)
    saved = copy.deepcopy(ema).to(memory_format=torch.contiguous_format)
    if hasattr(saved, "criterion"):
        saved.criterion = None
    tu.strip_qat(saved)
    return saved, modelopt


def checkpoint(trainer: Any, epoch: int, done: int, last_opt_step: int, tloss: Any) -> dict[str, Any]:
    """The checkpoint of the trainer now, to continue at batch `done` of `epoch`.

    last_opt_step: the iteration (epoch * batches + batch) of the optimizer's last step; the
    gradients accumulated since are kept when it was before the last batch trained."""
    ema, modelopt = _ema_copy(trainer)
    engine: Any = ultra.trainer_engine()
    return contents(
        trainer,
        epoch,
        done,
        last_opt_step,
        tloss,
        model=_torch_utils().unwrap_model(trainer.model),
        ema=ema,
        modelopt=modelopt,
        git=engine.GIT,
        version=ultra.version(),
    )


def scale_of(scaler: Any) -> float:
    """The AMP scaler's scale (what backward multiplied the loss by); 1.0 when disabled or absent."""
    if scaler is None or not scaler.is_enabled():
        return 1.0
    return float(scaler.get_scale())


def stock_epoch(epoch: int) -> int:
    """Ultralytics' `epoch` key of a checkpoint continuing in `epoch` (0-based): the last whole epoch,
    and 0 inside the first (see the module's doc)."""
    return max(epoch - 1, 0)


def contents(
    trainer: Any,
    epoch: int,
    done: int,
    last_opt_step: int,
    tloss: Any,
    *,
    model: Any,
    ema: Any,
    modelopt: Any,
    git: Any,
    version: str,
) -> dict[str, Any]:
    """checkpoint's dictionary from its parts: `model` the unwrapped model, `ema` its saved copy."""
    batches = len(trainer.train_loader)
    trained = epoch * batches + done - 1  # the iteration of the last batch trained
    return {
        "epoch": stock_epoch(epoch),
        "best_fitness": trainer.best_fitness,
        "stopper": {"best_fitness": trainer.stopper.best_fitness, "best_epoch": trainer.stopper.best_epoch},
        "model": None,
        "ema": ema,
        "updates": trainer.ema.updates,
        "modelopt": modelopt,
        "optimizer": trainer.optimizer.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "train_args": vars(trainer.args),
        "train_metrics": {**(trainer.metrics or {}), "fitness": trainer.fitness},
        "train_results": trainer.read_results_csv(),
        "date": datetime.now().astimezone().isoformat(),
        "version": version,
        "git": {
            "root": str(git.root),
            "branch": git.branch,
            "commit": git.commit,
            "message": git.message,
            "origin": git.origin,
        },
        "license": "AGPL-3.0 (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com",
        RESUME_KEY: {
            "format": FORMAT,
            "epoch": epoch,
            "done": done,
            "batches": batches,
            "saved": time.time(),
            "model": model.state_dict(),
            "last_opt_step": last_opt_step,
            "gradients": _gradients(model) if last_opt_step < trained else {},
            # The scale the gradients were accumulated under (AMP's; 1.0 without): another scaler
            # (a CPU checkpoint resumed on a GPU, or back) scales them by the ratio.
            "grad_scale": scale_of(trainer.scaler),
            "tloss": tloss,
            # What the loop learns at a run's first batch: a resumed epoch with no batch left validates.
            "loss_names": list(getattr(trainer, "loss_names", ()) or ()),
            "loss_items": getattr(trainer, "loss_items", None),
            "loss": getattr(trainer, "loss", None),
            # The learning rates of the last batch (the warmup's): what the epoch's row records.
            "lr": [group["lr"] for group in trainer.optimizer.param_groups],
        },
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


def restore(trainer: Any, ckpt: Mapping[str, Any]) -> Pending:
    """The model's own weights back (Ultralytics' resume loaded the optimizer, scaler, EMA, best
    fitness and early stopping from its keys); what the first resumed batch puts back."""
    state = ckpt[RESUME_KEY]
    model = _torch_utils().unwrap_model(trainer.model)
    model.load_state_dict(state["model"])
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


def put_gradients(trainer: Any, gradients: Mapping[str, Any]) -> None:
    model = _torch_utils().unwrap_model(trainer.model)
    for name, p in model.named_parameters():
        if name in gradients:
            p.grad = gradients[name].to(device=p.device, dtype=p.dtype)
