"""Ultralytics' named datasets: where they go, what their zip must hold (host tests, no network)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.yolo import datasets, named_datasets
from rig.yolo.named_datasets import Named, describe, unpack

from tests.helpers.datasets import make_dataset

COCO8 = "https://github.com/ultralytics/assets/releases/download/v0.0.0/coco8.zip"


def test_describe_follows_ultralytics_rule() -> None:
    spec = {"path": "coco8", "train": "images/train", "download": COCO8}
    assert describe(Path("coco8.yaml"), spec, Path("/datasets")) == Named(
        Path("coco8.yaml"), Path("/datasets/coco8"), COCO8
    )
    absolute = describe(Path("x.yaml"), {**spec, "path": "/data/x"}, Path("/datasets"))
    assert absolute.root == Path("/data/x")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"path": "voc", "download": "import os\nfrom pathlib import Path\n"}, "a script"),
        ({"path": "mine"}, "empty"),
        ({"train": "images"}, "no 'path:'"),
    ],
)
def test_describe_refuses_what_is_not_a_zip(spec: dict[str, str], message: str) -> None:
    with pytest.raises(RigError, match=message):
        describe(Path("d.yaml"), spec, Path("/datasets"))


def test_find_an_unknown_name() -> None:
    with pytest.raises(RigError, match=r"no dataset named nosuch\.yaml"):
        named_datasets.find("nosuch.yaml", Path("/datasets"))


def _zip(path: Path, *names: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "x")
    return path


def test_unpack_moves_the_dataset_into_place(tmp_path: Path) -> None:
    named = Named(Path("coco8.yaml"), tmp_path / "coco8", COCO8)
    unpack(_zip(tmp_path / "a.zip", "coco8/images/train/1.jpg", "coco8/labels/train/1.txt"), named)
    assert (tmp_path / "coco8/images/train/1.jpg").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip", "coco8"]  # no staging left


def test_unpack_refuses_a_zip_without_the_dataset(tmp_path: Path) -> None:
    named = Named(Path("coco8.yaml"), tmp_path / "coco8", COCO8)
    with pytest.raises(RigError, match="holds other, not coco8/"):
        unpack(_zip(tmp_path / "a.zip", "other/x.txt"), named)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip"]


def test_describe_takes_the_root_every_reader_takes(tmp_path: Path) -> None:
    # A moved copy (path: names a folder gone here, the yaml's folder holds the splits) is already there.
    yaml_file = make_dataset(tmp_path / "moved", 2, path="/gone/coco8")
    spec = {**datasets.read_spec(yaml_file), "download": COCO8}
    assert (
        describe(yaml_file, spec, tmp_path).root
        == datasets.load(yaml_file, tmp_path).root
        == tmp_path / "moved"
    )
