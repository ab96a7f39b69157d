"""Where a checkpoint continues, read from it (the writing is the image tests')."""

from __future__ import annotations

from rig.yolo import resumable


def test_position_is_read_from_rigs_key_only() -> None:
    state = {"format": 1, "epoch": 2, "done": 7, "batches": 16, "saved": 12.5}
    where = resumable.position({"epoch": 1, resumable.RESUME_KEY: state})
    assert where == resumable.Position(2, 7, 16, 12.5) and where.mid_epoch
    assert resumable.position({"epoch": 1}) is None  # Ultralytics' own checkpoint
    assert resumable.position({resumable.RESUME_KEY: None}) is None  # stripped at the end of training
    assert resumable.position({resumable.RESUME_KEY: {**state, "format": 99}}) is None  # another rig's
    assert resumable.position(None) is None


def test_a_position_says_what_resume_does() -> None:
    assert resumable.Position(2, 7, 16).describe(10) == "epoch 3/10 at batch 8/16"
    assert resumable.Position(2, 16, 16).describe(10) == "epoch 3/10 trained, its validation next"
    assert resumable.Position(3, 0, 16).describe(10) == "epoch 4/10 from its start"
    assert not resumable.Position(3, 0, 16).mid_epoch
