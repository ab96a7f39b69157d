"""`resume=auto`: continue a run directory's unfinished run, start it when it holds none, and say so
when it is finished, so a requeued or restarted job trains each epoch exactly once.

The run directory is the one the same command would train in (rig.launch.job), under a scheduler
named for the job (rig.launch.nodes.job_name), so a restart finds it again. What its `last.pt`
says is read once (`read_state`); what to do is a pure function of that (`decide`).

Planning never executes a checkpoint: `read_state` opens last.pt once, from `/` through folders
that pass rig.safefs's trust rule (rig.launch.rundir.open_checkpoint), and reads the few values it
needs from the pickle inside torch's zip archive with an unpickler that builds inert stand-ins for
every class or function the pickle names (nothing the file names is ever imported or called) and
skips the tensors' storage. What a pickle builds is bounded too (a few hundred kilobytes can
describe a hundred million lists): the reading runs in a child process whose address space is
limited to MAX_READ_BYTES more than the launcher's; past it, one line. The descriptor stays open
for the ranks' private copy (rig.launch.resumecopy): what is continued is what was read.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rig.errors import RigError
from rig.launch import resumecopy, rundir
from rig.yolo import resumable

MAX_PICKLE_BYTES = 256 << 20  # a checkpoint's data.pkl (its tensors are stored apart): a few MiB
MAX_READ_BYTES = 1 << 30  # what reading it may add to the launcher's address space
_MAX_REPLY = 1 << 16


@dataclass(frozen=True)
class RunState:
    last: Path
    exists: bool
    epoch: int = -1  # the last whole epoch saved (0-based); -1: none, or stripped at the end
    epochs: int = 0  # the epochs the run was asked for
    position: resumable.Position | None = None  # where a rig checkpoint continues
    stripped: bool = False  # Ultralytics' end of training: the optimizer stripped, epoch -1
    checked: resumecopy.Checked | None = field(default=None, compare=False)  # the last.pt read


@dataclass(frozen=True)
class Decision:
    kind: str  # "fresh", "resume" or "finished"
    message: str


class Unreadable(Exception):
    """Why the child could not read a checkpoint, as it said it (the type named)."""


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


def summary(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """What planning needs of a checkpoint's dictionary, as plain values."""
    args = ckpt.get("train_args") or {}
    where = resumable.position(ckpt)
    return {
        "epoch": int(ckpt.get("epoch", -1)),
        "epochs": int(args.get("epochs", 0) or 0),
        "position": None if where is None else [where.epoch, where.done, where.batches, where.saved],
        "stripped": ckpt.get("optimizer") is None,
    }


def _address_space() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def read_bounded(fd: int, limit: int | None = None) -> dict[str, Any]:
    """summary(_load(the file at fd)), read in a forked child whose address space may grow by `limit`
    bytes at most (RLIMIT_AS): a pickle that builds more is a MemoryError there, never the
    launcher's (or the node's) out-of-memory. The child hands back JSON. limit None: MAX_READ_BYTES."""
    limit = MAX_READ_BYTES if limit is None else limit
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, reply, exit without running the parent's clean-ups
        reply: dict[str, Any]
        try:
            os.close(read_end)
            bound = _address_space() + limit
            resource.setrlimit(resource.RLIMIT_AS, (bound, bound))
            with os.fdopen(os.dup(fd), "rb") as f:
                f.seek(0)
                reply = {"ok": summary(_load(f))}
        except MemoryError:
            reply = {"memory": True}
        except BaseException as e:  # the file's fault: said in the parent's one line
            reply = {"error": f"{type(e).__name__}: {e}"[:500]}
        try:
            os.write(write_end, json.dumps(reply).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    try:
        while chunk := os.read(read_end, _MAX_REPLY):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        reply = {"memory": True} if os.WIFSIGNALED(status) else {"error": "its reader ended unexpectedly"}
    if reply.get("memory"):
        raise MemoryError(f"reading it needs more than {limit >> 20} MiB of memory")
    if "error" in reply:
        raise Unreadable(reply["error"])
    return dict(reply["ok"])


def read_state(
    run_dir: Path, load: Callable[[IO[bytes]], Mapping[str, Any]] | None = None, uid: int | None = None
) -> RunState:
    """What run_dir's last.pt says; a last.pt (or a folder on its way) that is not the user's own:
    one line (rig.launch.rundir.open_checkpoint), before a byte of it is read. load: the reader, in
    this process (tests); by default rig's, bounded in a child (read_bounded)."""
    last = run_dir / "weights" / "last.pt"
    fd = rundir.open_checkpoint(run_dir, uid)
    if fd is None:
        return RunState(last, exists=False)
    checked = resumecopy.Checked(last, fd)
    try:
        if load is None:
            values = read_bounded(fd)
        else:
            with os.fdopen(os.dup(fd), "rb") as f:
                values = summary(load(f))
    except MemoryError as e:
        checked.close()
        raise RigError(
            f"resume=auto: {last} cannot be read ({e}: what its pickle builds); move it away to start the "
            "run again, or resume from another checkpoint with resume=True model=PATH"
        ) from None
    except Exception as e:
        checked.close()
        why = str(e) if isinstance(e, Unreadable) else f"{type(e).__name__}: {e}"
        raise RigError(
            f"resume=auto: {last} cannot be read ({why}); move it away to start the run "
            "again, or resume from another checkpoint with resume=True model=PATH"
        ) from None
    where = values["position"]
    return RunState(
        last,
        exists=True,
        epoch=values["epoch"],
        epochs=values["epochs"],
        position=None if where is None else resumable.Position(*where),
        stripped=values["stripped"],
        checked=checked,
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
