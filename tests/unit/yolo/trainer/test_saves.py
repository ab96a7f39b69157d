"""Periodic checkpoints: when one is due, and one that cannot be written."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from rig.yolo.trainer import saves


def test_a_checkpoint_is_due_a_period_after_the_last_save() -> None:
    now = [100.0]
    cadence = saves.Cadence(every=lambda: 5.0, clock=lambda: now[0])
    cadence.started()
    now[0] = 104.9
    assert not cadence.due()
    now[0] = 105.0
    assert cadence.due()
    assert cadence.saved() == 105.0 and not cadence.due()
    assert not saves.Cadence(every=lambda: 0.0, clock=lambda: 1e9).due()  # 0: none inside an epoch


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_periodic_checkpoint_that_cannot_be_written_is_one_warning(code: int, logged: Any) -> None:
    def write() -> None:
        raise OSError(code, "No space left on device" if code == errno.ENOSPC else "Input/output error")

    assert saves.periodic(write, "runs/x/weights/last.pt") is False
    assert len(logged.warnings()) == 1
    assert "could not write runs/x/weights/last.pt" in logged.warnings()[0]
    assert saves.periodic(lambda: None, "last.pt") is True and len(logged.warnings()) == 1


def test_any_other_error_is_not_swallowed() -> None:
    def write() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        saves.periodic(write, "last.pt")


def test_a_full_disk_leaves_the_previous_checkpoint_whole(tmp_path: Path, logged: Any) -> None:
    """Through the atomic save every trainer save takes (rig.launch.checkpoints)."""
    from rig.launch import checkpoints

    last = tmp_path / "last.pt"
    last.write_bytes(b"previous")

    def dump(_ckpt: Any, out: BinaryIO) -> None:
        out.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    assert saves.periodic(lambda: checkpoints.save({}, [last], dump=dump), last) is False
    assert last.read_bytes() == b"previous" and sorted(tmp_path.iterdir()) == [last]
    assert len(logged.warnings()) == 1
