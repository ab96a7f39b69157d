"""`resume=auto`: continue a run directory's unfinished run, start it when it holds none, and say so
when it is finished, so a requeued or restarted job trains each epoch exactly once.

The run directory is the one the same command would train in (rig.launch.job), under a scheduler
named for the job (rig.launch.nodes.job_name), so a restart finds it again. What its `last.pt`
says is read once (`read_state`); what to do is a pure function of that (`decide`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.errors import RigError
from rig.yolo import resumable, ultra


@dataclass(frozen=True)
class RunState:
    last: Path
    exists: bool
    epoch: int = -1  # the last whole epoch saved (0-based); -1: none, or stripped at the end
    epochs: int = 0  # the epochs the run was asked for
    position: resumable.Position | None = None  # where a rig checkpoint continues
    stripped: bool = False  # Ultralytics' end of training: the optimizer stripped, epoch -1


@dataclass(frozen=True)
class Decision:
    kind: str  # "fresh", "resume" or "finished"
    message: str


def _load(path: Path) -> Mapping[str, Any]:
    torch: Any = importlib.import_module("torch")
    ultra.load_model_classes()  # the checkpoint pickles Ultralytics' model classes
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(ckpt, Mapping):
        raise TypeError("not a checkpoint dictionary")
    return ckpt


def read_state(run_dir: Path, load: Callable[[Path], Mapping[str, Any]] | None = None) -> RunState:
    last = run_dir / "weights" / "last.pt"
    if not last.is_file():
        return RunState(last, exists=False)
    try:
        ckpt = (load or _load)(last)
    except Exception as e:
        raise RigError(
            f"resume=auto: {last} cannot be read ({type(e).__name__}: {e}); move it away to start the run "
            "again, or resume from another checkpoint with resume=True model=PATH"
        ) from None
    args = ckpt.get("train_args") or {}
    return RunState(
        last,
        exists=True,
        epoch=int(ckpt.get("epoch", -1)),
        epochs=int(args.get("epochs", 0) or 0),
        position=resumable.position(ckpt),
        stripped=ckpt.get("optimizer") is None,
    )


def decide(run_dir: Path, state: RunState) -> Decision:
    if not state.exists:
        return Decision("fresh", f"resume=auto: no last.pt in {run_dir}: starting the run there")
    where = state.position
    if not state.stripped and where is not None and where.epoch < state.epochs:
        return Decision("resume", f"resume=auto: continuing {state.last} at {where.describe(state.epochs)}")
    if not state.stripped and where is None and state.epoch >= 0 and state.epoch + 1 < state.epochs:
        return Decision(
            "resume", f"resume=auto: continuing {state.last} after epoch {state.epoch + 1}/{state.epochs}"
        )
    return Decision("finished", f"resume=auto: {run_dir} is finished ({state.last}); nothing to train")
