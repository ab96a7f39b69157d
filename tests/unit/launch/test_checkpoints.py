"""last.pt and best.pt survive a SIGKILL during a save: rig's trainer class over a base that saves the
way Ultralytics 8.4.190's save_model does (Path.write_bytes on last, best and wdir / epochN.pt), killed
for real while it saves. tests/image/test_multigpu.py does the same through Ultralytics' own save_model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rig.launch import checkpoints

_SIZE = 48 << 20  # big enough that a plain write takes milliseconds


class _SavingTrainer:
    def __init__(self, wdir: Path) -> None:
        self.world_size, self.save_period, self.epoch = 0, 1, 0
        self.wdir, self.last, self.best = wdir, wdir / "last.pt", wdir / "best.pt"

    def add_callback(self, event: str, _callback: Any) -> None:
        pass

    def save_model(self) -> bool:
        blob = bytes([self.epoch % 251]) * _SIZE
        self.wdir.mkdir(parents=True, exist_ok=True)
        self.last.write_bytes(blob)
        self.best.write_bytes(blob)
        (self.wdir / f"epoch{self.epoch % 2}.pt").write_bytes(blob)
        return True


def _save_forever(wdir: str) -> None:
    """The child: rig's trainer saving epoch after epoch until it is killed."""
    from rig.launch import trainer

    t = trainer.rig_trainer_class(_SavingTrainer)(Path(wdir))
    while True:
        t.save_model()
        print("SAVED", t.epoch, flush=True)
        t.epoch += 1


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
        # Kill in the middle of the next saves: once a save's temporary file is there (rig's way), or
        # once a checkpoint is seen half-written (a plain write_bytes truncates, then writes).
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


def test_the_next_save_removes_what_a_killed_save_left(tmp_path: Path) -> None:
    (tmp_path / ".last.pt.0a1b2c3d4e5f.tmp").write_bytes(b"half")
    (tmp_path / "notes.tmp").write_text("the user's")
    t = _SavingTrainer(tmp_path)
    with checkpoints.atomic_saves(t):
        assert isinstance(t.last, checkpoints.AtomicPath) and isinstance(
            t.wdir / "epoch1.pt", checkpoints.AtomicPath
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.tmp"]
    assert type(t.last) is type(tmp_path / "last.pt")  # restored after the save
