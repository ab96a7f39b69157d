"""rig.yolo.device_augment's parts that need neither torch nor Ultralytics (the pixel equality runs in
the image: tests/image/test_device_augment.py)."""

from __future__ import annotations

import logging

import pytest
from rig.yolo import device_augment


@pytest.mark.parametrize(
    ("value", "on"),
    [(None, True), ("1", True), ("on", True), ("0", False), ("off", False), (" False ", False)],
)
def test_on_unless_switched_off(value: str | None, on: bool) -> None:
    environ = {} if value is None else {device_augment.SWITCH: value}
    assert device_augment.enabled(environ) is on


def test_validation_datasets_and_the_switch_leave_ultralytics_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither path may touch ultralytics.data.build: importing it would fail here (no torch).
    monkeypatch.setattr(device_augment, "_announced", False)
    with device_augment.in_use("val", {}):
        pass
    with device_augment.in_use("train", {device_augment.SWITCH: "0"}):
        pass


def test_rig_train_says_once_which_pipeline_it_uses(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(device_augment, "_announced", False)
    off = {device_augment.SWITCH: "0"}
    with caplog.at_level(logging.INFO):
        for _ in range(2):  # the train dataset built again (close_mosaic): still one line
            with device_augment.in_use("train", off):
                pass
    assert [r.getMessage() for r in caplog.records] == [device_augment.describe(False)]
    assert "RIG_DEVICE_AUGMENT=0" in device_augment.describe(False)


def test_other_ranks_stay_quiet(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(device_augment, "_announced", False)
    with (
        caplog.at_level(logging.INFO),
        device_augment.in_use("train", {device_augment.SWITCH: "0", "RANK": "1"}),
    ):
        pass
    assert caplog.records == []


def test_a_batch_the_workers_finished_passes_through() -> None:
    batch = {"img": object(), "cls": object()}
    assert device_augment.finish(dict(batch), "cuda:0") == batch
