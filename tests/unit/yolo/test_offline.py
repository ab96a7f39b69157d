"""One-line answers for a missing weight or dataset, offline (host tests on fake volumes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.yolo.offline import check_args, missing_data, missing_weights

from tests.helpers.datasets import make_dataset


@pytest.fixture
def vols(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights/yolo11n.pt").write_bytes(b"x")
    make_dataset(tmp_path / "datasets/demo", 0)
    (tmp_path / "datasets/rel.yaml").write_text("path: demo\ntrain: images/train\nnames: {0: a}\n")
    (tmp_path / "datasets/gone.yaml").write_text("path: coco\ntrain: images/train2017\nnames: {0: a}\n")
    cfg = tmp_path / "cfg/Ultralytics"
    cfg.mkdir(parents=True)
    dirs = {"weights_dir": str(tmp_path / "weights"), "datasets_dir": str(tmp_path / "datasets")}
    (cfg / "settings.json").write_text(json.dumps(dirs))
    return {"YOLO_CONFIG_DIR": str(tmp_path / "cfg")}


@pytest.mark.parametrize(
    ("model", "missing_at"),
    [
        ("yolo11n.pt", None),  # in the weights volume
        ("yolo11n.yaml", None),  # an architecture: nothing to download
        ("yolo11s.pt", "{w}/yolo11s.pt"),
        ("/abs/best.pt", "/abs/best.pt"),
        ("runs/x/best.onnx", "runs/x/best.onnx"),
    ],
)
def test_missing_weights(tmp_path: Path, vols: dict[str, str], model: str, missing_at: str | None) -> None:
    got = missing_weights(model, tmp_path / "weights")
    if missing_at is None:
        assert got is None
    else:
        assert got is not None and "\n" not in got
        assert f"put the file at {missing_at.format(w=tmp_path / 'weights')} " in got


@pytest.mark.parametrize(
    ("data", "ok", "fragment"),
    [
        ("{d}/demo/data.yaml", True, ""),
        ("rel.yaml", True, ""),  # relative to datasets_dir, like Ultralytics
        ("gone.yaml", False, "put the dataset under {d}/coco"),
        ("nope.yaml", False, "put it at {d}/nope.yaml"),
    ],
)
def test_missing_data(tmp_path: Path, vols: dict[str, str], data: str, ok: bool, fragment: str) -> None:
    d = tmp_path / "datasets"
    got = missing_data(data.format(d=d), d)
    if ok:
        assert got is None
    else:
        assert got is not None and "\n" not in got and fragment.format(d=d) in got


def test_check_args_raises_one_line(vols: dict[str, str]) -> None:
    with pytest.raises(RigError) as e:
        check_args(["predict", "model=yolo11x.pt", "source=img.jpg"], vols)
    assert "yolo11x.pt" in str(e.value) and "\n" not in str(e.value)
    check_args(["train", "model=yolo11n.pt", "data=rel.yaml"], vols)  # both present: no error
