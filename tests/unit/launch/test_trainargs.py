"""Ultralytics' train arguments as `rig train` decides them (rig.launch.trainargs): each rule a pure
step, called directly with what Ultralytics would know."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.launch import levers, trainargs
from rig.yolo import tuning, ultra


def test_key_values_are_parsed_once_each() -> None:
    assert trainargs.parse_kv(["epochs=3", "name=a=b", "project="]) == {
        "epochs": "3",
        "name": "a=b",
        "project": "",
    }
    for bad in (["epochs"], ["=3"], ["--epochs=3"]):
        with pytest.raises(RigError, match="expected an Ultralytics argument key=value"):
            trainargs.parse_kv(bad)
    with pytest.raises(RigError, match="argument epochs is given twice"):
        trainargs.parse_kv(["epochs=3", "epochs=4"])


@pytest.mark.parametrize("resume", ["False", "false", "none", "", " None "])
def test_resume_false_in_any_spelling_is_no_resume(resume: str) -> None:
    assert trainargs.resume_of({"resume": resume}) is False
    assert trainargs.resume_of({}) is False
    assert trainargs.resume_of({"resume": "True"}) is True
    assert trainargs.resume_of({"resume": "a/last.pt"}) == "a/last.pt"


@pytest.mark.parametrize(
    ("args", "task"),
    [({}, "detect"), ({"model": "yolo11n-seg.pt"}, "segment"), ({"model": "x/yolo11s-cls.yaml"}, "classify"),
     ({"model": "yolo11n-pose.pt", "task": "obb"}, "obb")],
)  # fmt: skip
def test_the_task_is_ultralytics_guess_from_the_model_name(args: dict[str, str], task: str) -> None:
    assert trainargs.guess_task(args) == task


def test_levers_take_rig_s_sync_bn_out_and_rect_off_under_ddp(caplog: pytest.LogCaptureFixture) -> None:
    args, env = trainargs.with_levers(
        {"rect": "True", "sync_bn": "True", "epochs": "1"},
        world=2,
        cpu=False,
        smart_value=ultra._plain_value,
    )
    assert args == {"rect": "False", "epochs": "1"} and env == {levers.SYNC_BN_ENV: "1"}
    assert "rect=True with 2 ranks" in caplog.text
    args, env = trainargs.with_levers(
        {"rect": "True", "sync_bn": "True"}, world=1, cpu=True, smart_value=ultra._plain_value
    )
    assert args == {"rect": "True"} and env == {}
    assert "sync_bn=True ignored: device=cpu" in caplog.text


def test_tuning_fills_only_what_the_user_left_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rig")
    decisions = [tuning.Decision("workers", "4", "4 CPUs per rank"), tuning.Decision("cache", "ram", "fits")]
    assert trainargs.with_tuning({"workers": "2"}, decisions) == {"workers": "2", "cache": "ram"}
    assert "cache=ram: fits" in caplog.text and "workers=4" not in caplog.text


def _found(tmp_path: Path, **kw: object) -> trainargs.Found:
    """What discovery would read in tmp_path: the demo yaml and yolo11n.pt if they are there."""
    demo, weights = tmp_path / "demo.yaml", tmp_path / "weights/yolo11n.pt"
    facts = {
        "demo_data": demo,
        "demo_data_exists": demo.exists(),
        "default_weights": weights,
        "default_weights_exist": weights.exists(),
        "default_batch": 16.0,
    }
    return trainargs.Found(**{**facts, **kw})  # type: ignore[arg-type]


def test_defaults_are_the_demo_data_and_yolo11n(tmp_path: Path) -> None:
    demo, weights = tmp_path / "demo.yaml", tmp_path / "weights"
    with pytest.raises(
        RigError, match=r"no data= given and no demo dataset at .*demo\.yaml; run `make demo-data`"
    ):
        trainargs.with_defaults({}, _found(tmp_path))
    demo.write_text("train: images\n")
    assert trainargs.with_defaults({}, _found(tmp_path)) == {
        "data": str(demo),
        "model": "yolo11n.yaml",  # offline, no weights: from scratch
    }
    assert trainargs.default_data({}, _found(tmp_path)) == str(demo)
    weights.mkdir()
    (weights / "yolo11n.pt").write_bytes(b"")
    assert trainargs.with_defaults({"data": "d.yaml"}, _found(tmp_path))["model"] == "yolo11n.pt"
    assert trainargs.with_defaults({"resume": "True"}, _found(tmp_path)) == {"resume": "True"}
    assert trainargs.default_data({"resume": "True"}, _found(tmp_path)) is None


def test_resume_true_continues_the_newest_run(tmp_path: Path) -> None:
    runs, last = tmp_path / "runs", tmp_path / "runs/detect/train-2/weights/last.pt"
    with pytest.raises(RigError, match=r"^resume=True: no last.pt under .*; give model=path/to/last.pt"):
        trainargs.with_resume({"resume": "True"}, None, runs)
    assert trainargs.with_resume({"resume": "True"}, last, runs) == {"resume": "True", "model": str(last)}
    assert trainargs.with_resume({"resume": "True", "model": "a/last.pt"}, last, runs)["model"] == "a/last.pt"
    assert not trainargs.wants_newest_last({"resume": "True", "model": "a/last.pt"})


def test_runs_go_under_the_runs_dir_by_task(tmp_path: Path) -> None:
    assert trainargs.project({}, runs_dir=tmp_path) == tmp_path / "detect"
    assert (
        trainargs.project({"model": "m-seg.pt", "project": "p"}, runs_dir=tmp_path) == tmp_path / "segment/p"
    )
    assert trainargs.project({"project": "/abs"}, runs_dir=tmp_path) == Path("/abs")
