"""rig.yolo.augment.dataset's parts that need neither torch nor Ultralytics (the pixel equality runs in
the image: tests/image/test_dataset.py)."""

from __future__ import annotations

import logging

import pytest
from rig.yolo.augment import dataset


@pytest.mark.parametrize(
    ("value", "on"),
    [(None, True), ("1", True), ("on", True), ("0", False), ("off", False), (" False ", False)],
)
def test_on_unless_switched_off(value: str | None, on: bool) -> None:
    environ = {} if value is None else {dataset.SWITCH: value}
    assert dataset.enabled(environ) is on


def test_validation_datasets_and_the_switch_leave_ultralytics_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither path may touch ultralytics.data.build: importing it would fail here (no torch).
    monkeypatch.setattr(dataset, "_announced", False)
    with dataset.in_use("val", {}):
        pass
    with dataset.in_use("train", {dataset.SWITCH: "0"}):
        pass


def test_rig_train_says_once_which_pipeline_it_uses(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(dataset, "_announced", False)
    off = {dataset.SWITCH: "0"}
    with caplog.at_level(logging.INFO):
        for _ in range(2):  # the train dataset built again (close_mosaic): still one line
            with dataset.in_use("train", off):
                pass
    assert [r.getMessage() for r in caplog.records] == [dataset.describe(False)]
    assert "RIG_DEVICE_AUGMENT=0" in dataset.describe(False)


def test_other_ranks_stay_quiet(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(dataset, "_announced", False)
    with (
        caplog.at_level(logging.INFO),
        dataset.in_use("train", {dataset.SWITCH: "0", "RANK": "1"}),
    ):
        pass
    assert caplog.records == []
