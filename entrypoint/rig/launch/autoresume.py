"""`resume=auto`: continue a run directory's unfinished run, start it when it holds none, and say so
when it is finished, so a requeued or restarted job trains each epoch exactly once.

The run directory is the one the same command would train in (rig.launch.job), under a scheduler
named for the job (rig.launch.nodes.job_name), so a restart finds it again. What its `last.pt`
says is read once (`read_state`); what to do is a pure function of that (`decide`).

Planning never executes a checkpoint: `read_state` opens last.pt only when it passed
rig.launch.rundir's ownership checks, and reads the few values it needs from the pickle inside
torch's zip archive with an unpickler that builds inert stand-ins for every class or function the
pickle names (nothing the file names is ever imported or called) and skips the tensors' storage.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rig.errors import RigError
from rig.launch import rundir
from rig.yolo import resumable

MAX_PICKLE_BYTES = 256 << 20  # a checkpoint's data.pkl (its tensors are stored apart): a few MiB


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


class _Inert:
    """What any class or function a checkpoint's pickle names becomes: it takes whatever it is given
    (arguments, state, items) and does nothing."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> _Inert:
        return object.__new__(cls)

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __setstate__(self, _state: Any) -> None:
        pass

    def __setitem__(self, _key: Any, _value: Any) -> None:
        pass

    def append(self, _value: Any) -> None:
        pass

    def extend(self, _values: Any) -> None:
        pass


class _InertUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return _Inert

    def persistent_load(self, pid: Any) -> None:
        return None  # a tensor's storage: not needed to plan


def _load(f: IO[bytes]) -> Mapping[str, Any]:
    """The checkpoint's dictionary, its objects inert (see the module's doc): torch.save's zip archive
    holds the pickle as <archive>/data.pkl."""
    with zipfile.ZipFile(f) as z:
        names = [i for i in z.infolist() if i.filename.count("/") == 1 and i.filename.endswith("/data.pkl")]
        if not names:
            raise ValueError("not a torch checkpoint (no data.pkl in its archive)")
        if names[0].file_size > MAX_PICKLE_BYTES:
            raise ValueError(f"its data.pkl is larger than {MAX_PICKLE_BYTES >> 20} MiB")
        data = z.read(names[0])
    ckpt = _InertUnpickler(io.BytesIO(data)).load()
    if not isinstance(ckpt, Mapping):
        raise TypeError("not a checkpoint dictionary")
    return ckpt


def read_state(
    run_dir: Path, load: Callable[[IO[bytes]], Mapping[str, Any]] | None = None, uid: int | None = None
) -> RunState:
    """What run_dir's last.pt says; a last.pt (or a folder on its way) that is not the user's own:
    one line (rig.launch.rundir.open_checkpoint), before a byte of it is read."""
    last = run_dir / "weights" / "last.pt"
    fd = rundir.open_checkpoint(run_dir, uid)
    if fd is None:
        return RunState(last, exists=False)
    try:
        with os.fdopen(fd, "rb") as f:
            ckpt = (load or _load)(f)
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
