"""Checkpoints: Ultralytics' own, written atomically, with rig's keys added; and when rank 0 writes
one inside an epoch.

Ultralytics' save_model serialises its checkpoint once and writes the bytes with
`self.last.write_bytes` (and best.pt, epochN.pt). rig's trainer makes `wdir`, `last` and `best`
paths of `path_type`, whose write_bytes hands the bytes to `Writes`:
- every write is atomic (a temporary file renamed over the old one: a kill leaves the old
  checkpoint or the new one), in the run's file mode (the rank's `write`);
- while rig saves (`Writes.extending`), the checkpoint gets rig's keys: Ultralytics' dictionary is
  read back from the bytes, its `epoch` set to where stock Ultralytics resumes, rig's resume state
  added (rig.yolo.resumable.state). A failure in rig's part is one WARNING and the file is
  Ultralytics' checkpoint as its save_model made it: rig never costs a run its checkpoint;
- a save inside an epoch writes last.pt alone (`only`): not best.pt, not epochN.pt.

A periodic checkpoint that cannot be written (a full disk, an I/O error, anything that raises) is
one WARNING: the run continues, its previous checkpoint in place. A stop's checkpoint is the run's
last word: its failure ends the run with the error.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rig import log
from rig.yolo import resumable

_logger = log.get("trainer")

# What a checkpoint file is written from: its bytes, or a function writing them into the open file.
Data = bytes | Callable[[BinaryIO], object]


@dataclass
class Cadence:
    """Periodic checkpoints every `every` seconds (0: none inside an epoch), from the last save."""

    every: Callable[[], float]
    clock: Callable[[], float] = time.monotonic
    last: float = field(default=0.0)

    def started(self) -> None:
        self.last = self.clock()

    def due(self) -> bool:
        every = self.every()
        return every > 0 and self.clock() - self.last >= every

    def saved(self) -> float:
        """Marks a save (or a failed try: the next comes `every` seconds on); the time now."""
        self.last = self.clock()
        return self.last


def periodic(write: Callable[[], None], where: object) -> bool:
    """write() a periodic checkpoint of `where`; any failure (a full disk, an I/O error, a bug) is one
    WARNING and False: the run continues, its previous checkpoint in place."""
    try:
        write()
    except Exception as e:
        _logger.warning(
            "checkpoint: could not write %s (%s); the previous checkpoint stays, training continues",
            where,
            getattr(e, "strerror", None) or f"{type(e).__name__}: {e}",
        )
        return False
    return True


@dataclass(frozen=True)
class Extension:
    """rig's part of one save: the `epoch` key stock Ultralytics resumes after, rig's resume state
    (None: none added), and the one file written (a save inside an epoch: last.pt)."""

    epoch_key: int
    state: Callable[[], Mapping[str, Any]] | None
    only: Path | None = None


class Writes:
    """Where the checkpoint paths' write_bytes go (see the module's doc)."""

    def __init__(
        self,
        write: Callable[[Path, Data], None],
        load: Callable[[bytes], dict[str, Any]] | None = None,
        dump: Callable[[Any, BinaryIO], object] | None = None,
    ) -> None:
        self._write = write
        self._load = load or _torch_load
        self._dump = dump or _torch_dump
        self.extension: Extension | None = None
        self._first: tuple[int, Path] | None = None  # the bytes written extended, and where

    @contextlib.contextmanager
    def extending(
        self, epoch_key: int, state: Callable[[], Mapping[str, Any]] | None, only: Path | None = None
    ) -> Iterator[None]:
        """rig's keys in every checkpoint Ultralytics writes while inside."""
        self.extension, self._first = Extension(epoch_key, state, only), None
        try:
            yield
        finally:
            self.extension, self._first = None, None

    def write(self, path: Path, data: bytes) -> None:
        ext = self.extension
        if ext is None:
            self._write(path, data)
            return
        if ext.only is not None and Path(path) != Path(ext.only):
            return  # a save inside an epoch: its best.pt and epochN.pt are not this save's
        if self._first is not None and self._first[0] == id(data):
            # The same checkpoint under another name (best.pt beside last.pt): a copy of the first.
            self._write(path, _copy_of(self._first[1]))
            return
        try:
            self._write(path, self._extended(data, ext))
        except Exception as e:
            self._write(path, data)  # raises where the file cannot be written at all: the caller says so
            _logger.warning(
                "checkpoint: rig's part of %s failed (%s: %s); it is Ultralytics' own checkpoint: a resume "
                "reruns its epoch",
                path,
                type(e).__name__,
                e,
            )
            return
        self._first = (id(data), Path(path))

    def _extended(self, data: bytes, ext: Extension) -> Data:
        ckpt = self._load(data)
        ckpt["epoch"] = ext.epoch_key
        if ext.state is not None:
            ckpt[resumable.RESUME_KEY] = dict(ext.state())
        # Serialised into the file itself: no second copy of a large checkpoint in memory.
        return lambda out: self._dump(ckpt, out)


def path_type(writes: Writes) -> type[Path]:
    """A Path class whose write_bytes goes to `writes` (paths made from one with `/` are its too)."""

    class CheckpointPath(type(Path())):  # type: ignore[misc]
        def write_bytes(self, data: Any) -> int:
            blob = bytes(data)
            writes.write(self, blob)
            return len(blob)

    return CheckpointPath


def _copy_of(source: Path) -> Callable[[BinaryIO], object]:
    def copy(out: BinaryIO) -> None:
        with source.open("rb") as f:
            shutil.copyfileobj(f, out, 1 << 20)

    return copy


def _torch_load(data: bytes) -> dict[str, Any]:
    # Bytes this process serialised a moment ago (Ultralytics' save_model): nothing from a file.
    torch: Any = importlib.import_module("torch")
    loaded: dict[str, Any] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    return loaded


def _torch_dump(obj: Any, out: BinaryIO) -> None:
    importlib.import_module("torch").save(obj, out)
