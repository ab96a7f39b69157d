"""Checkpoints replaced atomically: `last.pt`, `best.pt` and `epochN.pt` are never half-written.

Ultralytics' `save_model` writes each checkpoint with `Path.write_bytes`, which truncates the file
and then writes it: a SIGKILL in between (torchrun's or Docker's at the end of the stop grace, an
OOM kill) leaves a truncated `last.pt`, and `resume=True` has nothing to resume. While rig's trainer
saves, its weight paths write through `safefs.write_file` instead (a temporary file in the same
folder, fsync, rename over the old one): a kill leaves the old checkpoint or the new one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path, PosixPath
from typing import Any

from rig import safefs


def _file_mode() -> int:
    """What write_bytes would give a new file: 0o666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class AtomicPath(PosixPath):
    """A path whose write_bytes replaces the file atomically; paths joined under it are AtomicPaths."""

    def write_bytes(self, data: Any) -> int:
        view = memoryview(data)
        safefs.write_file(Path(self), view.tobytes() if not isinstance(data, bytes) else data, _file_mode())
        return view.nbytes


def remove_leftovers(folder: Path) -> list[str]:
    """The temporary files of saves killed half-way (safefs' `.NAME.HEX.tmp`); returns their names."""
    removed = []
    for tmp in folder.glob(".*.pt.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp.name)
    return removed


@contextlib.contextmanager
def atomic_saves(trainer: Any) -> Iterator[None]:
    """While the trainer saves: its `wdir`, `last` and `best` are AtomicPaths."""
    kept = {name: getattr(trainer, name) for name in ("wdir", "last", "best")}
    remove_leftovers(Path(kept["wdir"]))
    for name, value in kept.items():
        setattr(trainer, name, AtomicPath(value))
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(trainer, name, value)
