"""last.pt and best.pt survive a SIGKILL during a save: rig's checkpoint writer (every save of its
trainer: epoch ends, stops, periodic checkpoints) killed for real while it writes a large checkpoint,
and the end of training's rewrite (Ultralytics' strip_optimizer, made atomic). The image tests
(test_ddp_faults.py) do the same through rig's trainer and torch.save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from rig.launch import checkpoints

_SIZE = 48 << 20  # big enough that a write takes milliseconds


def _dump(epoch: Any, out: BinaryIO) -> None:
    """As torch.save streams a checkpoint: in pieces."""
    piece = bytes([int(epoch) % 251]) * (1 << 20)
    for _ in range(_SIZE >> 20):
        out.write(piece)


def _writes() -> Any:
    """rig's trainer's checkpoint paths (rig.yolo.trainer.saves): Ultralytics' save_model writes through
    them, each file through checkpoints.write; rig's keys added (here: the bytes, streamed by _dump)."""
    from rig.yolo.trainer import saves

    writes = saves.Writes(
        checkpoints.write, load=lambda _data: {}, dump=lambda ckpt, out: _dump(ckpt["epoch"], out)
    )
    return writes, saves.path_type(writes)


def _ultralytics_save(folder: Path, epoch: int) -> None:
    """BaseTrainer.save_model's writes: one serialised checkpoint under every name."""
    data = b"Ultralytics' checkpoint"
    for name in ("last.pt", "best.pt", f"epoch{epoch % 2}.pt"):
        (folder / name).write_bytes(data)


def _save_forever(wdir: str) -> None:
    """The child: checkpoint after checkpoint, as rig's trainer saves at its epoch ends."""
    writes, paths = _writes()
    folder = paths(wdir)
    folder.mkdir(parents=True, exist_ok=True)
    epoch = 0
    while True:
        with writes.extending(epoch, None):
            _ultralytics_save(folder, epoch)
        print("SAVED", epoch, flush=True)
        epoch += 1


def _whole(path: Path) -> bool:
    data = path.read_bytes()
    return len(data) == _SIZE and data == data[:1] * _SIZE


def test_a_sigkill_during_a_save_leaves_the_old_checkpoint_or_the_new_one(tmp_path: Path) -> None:
    wdir = tmp_path / "weights"
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'entrypoint'}"}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from tests.unit.launch.test_checkpoints import _save_forever; _save_forever({str(wdir)!r})",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    partial: list[str] = []
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("SAVED 0")  # one whole save: the old checkpoint
        deadline = time.monotonic() + 60
        # Kill in the middle of the next saves: once a save's temporary file is there, or once a
        # checkpoint is seen half-written (a plain write truncates, then writes).
        while time.monotonic() < deadline:
            saving = any(wdir.glob(".*.tmp"))
            sizes = {p.name: p.stat().st_size for p in wdir.glob("*.pt") if p.exists()}
            partial += [f"{name}: {size} bytes" for name, size in sizes.items() if size != _SIZE]
            if partial or saving:
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert not partial, f"a checkpoint was seen half-written: {partial}"
    for name in ("last.pt", "best.pt"):
        assert _whole(wdir / name), f"{name} is not a whole checkpoint after the kill"


def test_the_next_save_removes_what_a_killed_save_left_and_copies_are_files_of_their_own(
    tmp_path: Path,
) -> None:
    (tmp_path / ".last.pt.0a1b2c3d4e5f.tmp").write_bytes(b"half")
    (tmp_path / "notes.tmp").write_text("the user's")
    writes, paths = _writes()
    with writes.extending(3, None):
        _ultralytics_save(paths(tmp_path), 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch1.pt", "last.pt", "notes.tmp"]
    assert _whole(tmp_path / "best.pt") and (tmp_path / "best.pt").read_bytes()[:1] == b"\x03"
    # Rewriting one in place (as strip_optimizer's torch.save does) leaves the other alone.
    assert os.stat(tmp_path / "best.pt").st_ino != os.stat(tmp_path / "last.pt").st_ino


def test_the_end_of_training_rewrite_is_atomic_and_drops_what_only_training_needs(tmp_path: Path) -> None:
    last = tmp_path / "last.pt"
    last.write_bytes(b"the epoch's checkpoint")
    seen: dict[str, Any] = {}

    def strip(f: Any, s: Any = "", updates: dict[str, Any] | None = None) -> dict[str, Any]:
        seen.update(f=f, s=s, updates=updates)
        Path(s or f).write_bytes(b"stripped")
        return {"train_results": 1}

    stripped = checkpoints.atomic_strip(strip, ["rig_resume"])
    assert stripped(last, updates={"train_results": 2}) == {"train_results": 1}
    assert last.read_bytes() == b"stripped" and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
    assert Path(seen["s"]).parent == tmp_path and seen["s"] != str(last)  # written aside, renamed over
    assert seen["updates"] == {"rig_resume": None, "train_results": 2}

    def killed(f: Any, s: Any = "", updates: dict[str, Any] | None = None) -> dict[str, Any]:
        Path(s).write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checkpoints.atomic_strip(killed)(last)
    assert last.read_bytes() == b"stripped" and sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
