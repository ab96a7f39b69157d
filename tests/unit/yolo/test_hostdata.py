"""A host data.yaml mounted at /mnt/data: its paths resolved the way they read on the host."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml
from rig.errors import RigError
from rig.yolo.hostdata import resolve_args, resolve_spec

from tests.helpers.datasets import make_dataset

HOST = PurePosixPath("/data/helmets")
MOUNT = PurePosixPath("/mnt/data")


@pytest.mark.parametrize(
    ("spec", "path", "train"),
    [
        ({"train": "images/train"}, "/mnt/data", "images/train"),  # no path: next to the yaml
        ({"path": ".", "train": "images/train"}, "/mnt/data", "images/train"),
        ({"path": "sub/set", "train": "images"}, "/mnt/data/sub/set", "images"),
        ({"path": "/data/helmets", "train": "images/train"}, "/mnt/data", "images/train"),
        ({"path": "/data/helmets/v2/", "train": "a"}, "/mnt/data/v2", "a"),
        ({"path": "/datasets/shared", "train": "images"}, "/datasets/shared", "images"),  # a container path
        ({"train": "/data/helmets/images/train"}, "/mnt/data", "/mnt/data/images/train"),
        ({"train": ["/data/helmets/a", "b"]}, "/mnt/data", ["/mnt/data/a", "b"]),
        ({"path": "/data/helmets2", "train": "x"}, "/data/helmets2", "x"),  # a sibling, not inside
    ],
)
def test_resolve_spec(spec: dict[str, object], path: str, train: object) -> None:
    out = resolve_spec({**spec, "names": {0: "helmet"}}, HOST, MOUNT)
    assert out["path"] == path and out["train"] == train and out["names"] == {0: "helmet"}


def test_a_path_outside_the_mounted_folder_is_one_line() -> None:
    with pytest.raises(RigError, match=r"path: \.\./other leaves /data/helmets"):
        resolve_spec({"path": "../other", "train": "images"}, HOST, MOUNT)


def test_resolve_args_writes_a_resolved_copy(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    make_dataset(mount, 2, path="/host/helmets")  # written on the host, with its host path
    args = ["epochs=1", f"data={mount}/data.yaml", "imgsz=64"]
    out = resolve_args(args, {"RIG_DATA_HOST_DIR": "/host/helmets"}, mount=mount)
    assert out[0] == "epochs=1" and out[2] == "imgsz=64"
    copy = Path(out[1].removeprefix("data="))
    assert copy != mount / "data.yaml" and copy.name == "data.yaml"
    spec = yaml.safe_load(copy.read_text())
    assert spec["path"] == str(mount) and (Path(spec["path"]) / spec["train"]).is_dir()


@pytest.mark.parametrize(
    ("args", "environ"),
    [
        (["data=/datasets/demo/data.yaml"], {"RIG_DATA_HOST_DIR": "/host"}),  # not in the mount
        (["data={mount}/data.yaml"], {}),  # no host folder named
    ],
)
def test_resolve_args_leaves_container_yamls(
    tmp_path: Path, args: list[str], environ: dict[str, str]
) -> None:
    args = [a.format(mount=tmp_path) for a in args]
    assert resolve_args(args, environ, mount=tmp_path) == args
