"""Checkpoints replaced atomically: `last.pt`, `best.pt` and `epochN.pt` are never half-written.

Ultralytics writes each checkpoint with `Path.write_bytes` (its `save_model`) or `torch.save` to the
path itself (`strip_optimizer`, the end-of-training rewrite of last.pt and best.pt), which truncate
the file and then write it: a SIGKILL in between (torchrun's or Docker's at the end of the stop
grace, an OOM kill) leaves a truncated file, and `resume=True` has nothing to resume. Every write of
rig's trainer (`write`: what Ultralytics' save_model writes, through rig.yolo.trainer.saves;
`atomic_strip`: the end of training) goes through a temporary file in the same folder, fsync,
rename over the old one: a kill leaves the old checkpoint or the new one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rig import safefs
from rig.launch import rundir


def _file_mode() -> int:
    """Private (0600), or readable by RIG_SHARE_GROUP (0640): never by every user of shared storage."""
    return rundir.file_mode()


def remove_leftovers(folder: Path) -> list[str]:
    """The temporary files of saves killed half-way (safefs' `.NAME.HEX.tmp`); returns their names."""
    removed = []
    for tmp in folder.glob(".*.pt.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp.name)
    return removed


def write(path: Path, data: bytes | Callable[[BinaryIO], object]) -> None:
    """A checkpoint file written atomically in the run's file mode: its bytes, or what `data` writes
    into the open file; the leftovers of saves killed half-way go first."""
    remove_leftovers(path.parent)
    safefs.write_file(path, data, _file_mode())


def atomic_strip(
    strip: Callable[..., dict[str, Any]], drop: Sequence[str] = ()
) -> Callable[..., dict[str, Any]]:
    """Ultralytics' strip_optimizer (the end of training's rewrite of last.pt and best.pt) writing a
    temporary file renamed over the checkpoint, and setting the keys in `drop` to None (what only
    training needs)."""

    def stripped(f: Any, s: Any = "", updates: dict[str, Any] | None = None) -> dict[str, Any]:
        target = Path(s or f)
        tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            out = strip(f, str(tmp), updates={**dict.fromkeys(drop), **(updates or {})})
            if tmp.exists():
                with tmp.open("rb") as written:
                    os.fsync(written.fileno())
                os.chmod(tmp, _file_mode())
                os.replace(tmp, target)
            return out
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    return stripped
