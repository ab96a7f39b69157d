"""Checkpoints: Ultralytics' own with rig's keys added (Writes), when a periodic one is due, and one
that cannot be written."""

from __future__ import annotations

import errno
import pickle
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


def test_any_error_at_a_periodic_save_is_one_warning_and_training_goes_on(logged: Any) -> None:
    def write() -> None:
        raise ValueError("a bug")

    assert saves.periodic(write, "last.pt") is False
    assert len(logged.warnings()) == 1 and "ValueError: a bug" in logged.warnings()[0]


def test_a_full_disk_leaves_the_previous_checkpoint_whole(tmp_path: Path, logged: Any) -> None:
    """Through the atomic save every trainer save takes (rig.launch.checkpoints)."""
    from rig.launch import checkpoints

    last = tmp_path / "last.pt"
    last.write_bytes(b"previous")

    def dump(_ckpt: Any, out: BinaryIO) -> None:
        out.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    assert saves.periodic(lambda: checkpoints.write(last, lambda out: dump({}, out)), last) is False
    assert last.read_bytes() == b"previous" and sorted(tmp_path.iterdir()) == [last]
    assert len(logged.warnings()) == 1


# ---- Ultralytics' checkpoint, rig's keys added ------------------------------------------------------


class _Files:
    """The rank's write (rig.launch.checkpoints.write, atomic), its files read back by name."""

    def __init__(self, fail: type[Exception] | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.fail = fail

    def write(self, path: Path, data: Any) -> None:
        from rig.launch import checkpoints

        if self.fail is not None:
            raise self.fail("cannot write")
        checkpoints.write(Path(path), data)
        self.files[Path(path).name] = Path(path).read_bytes()


def _writes(files: _Files) -> saves.Writes:
    return saves.Writes(files.write, load=pickle.loads, dump=lambda ckpt, out: pickle.dump(ckpt, out))


def _ultralytics_save(last: Path, best: Path, epoch_pt: Path | None = None) -> None:
    """BaseTrainer.save_model's writes: its checkpoint serialised once, then under each name."""
    data = pickle.dumps({"epoch": 7, "ema": "fp16", "optimizer": "fp16"})
    last.write_bytes(data)
    best.write_bytes(data)
    if epoch_pt is not None:
        epoch_pt.write_bytes(data)


def test_an_epoch_end_save_is_ultralytics_checkpoint_with_rigs_keys_under_every_name(tmp_path: Path) -> None:
    files = _Files()
    writes = _writes(files)
    paths = saves.path_type(writes)
    wdir = paths(tmp_path / "weights")
    with writes.extending(3, lambda: {"format": 2, "done": 0}):
        _ultralytics_save(wdir / "last.pt", wdir / "best.pt", wdir / "epoch3.pt")
    last = pickle.loads(files.files["last.pt"])
    assert last == {"epoch": 3, "ema": "fp16", "optimizer": "fp16", "rig_resume": {"format": 2, "done": 0}}
    assert files.files["best.pt"] == files.files["epoch3.pt"] == files.files["last.pt"]


def test_a_save_inside_an_epoch_writes_last_pt_alone(tmp_path: Path) -> None:
    files = _Files()
    writes = _writes(files)
    wdir = saves.path_type(writes)(tmp_path)
    with writes.extending(0, lambda: {"done": 5}, only=wdir / "last.pt"):
        _ultralytics_save(wdir / "last.pt", wdir / "best.pt", wdir / "epoch0.pt")
    assert sorted(files.files) == ["last.pt"]
    assert pickle.loads(files.files["last.pt"])["rig_resume"] == {"done": 5}


def test_rigs_part_failing_keeps_ultralytics_checkpoint_with_one_warning(tmp_path: Path, logged: Any) -> None:
    files = _Files()
    writes = _writes(files)
    wdir = saves.path_type(writes)(tmp_path)

    def broken() -> dict[str, Any]:
        raise AttributeError("module 'ultralytics.utils.torch_utils' has no attribute 'qat_state'")

    with writes.extending(3, broken):
        _ultralytics_save(wdir / "last.pt", wdir / "best.pt")
    assert pickle.loads(files.files["last.pt"]) == {"epoch": 7, "ema": "fp16", "optimizer": "fp16"}
    assert files.files["best.pt"] == files.files["last.pt"]
    assert len(logged.warnings()) == 2 and "it is Ultralytics' own checkpoint" in logged.warnings()[0]


def test_outside_rigs_saves_the_bytes_go_as_they_are_atomically(tmp_path: Path) -> None:
    files = _Files()
    wdir = saves.path_type(_writes(files))(tmp_path)
    assert (wdir / "last.pt").write_bytes(b"raw") == 3
    assert files.files == {"last.pt": b"raw"}


def test_a_file_that_cannot_be_written_raises_for_the_caller_to_say(tmp_path: Path, logged: Any) -> None:
    writes = _writes(_Files(fail=OSError))
    wdir = saves.path_type(writes)(tmp_path)
    with pytest.raises(OSError), writes.extending(3, lambda: {}):
        _ultralytics_save(wdir / "last.pt", wdir / "best.pt")
    assert not logged.warnings()  # the caller's line (a periodic save's WARNING) says it, once
