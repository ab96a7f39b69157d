"""A host data.yaml mounted at /mnt/data: its paths resolved the way they read on the host."""

from __future__ import annotations

import logging
from pathlib import Path, PurePosixPath

import pytest
import yaml
from rig.errors import RigError
from rig.yolo.hostdata import HOST_DIR_VAR, resolve_args, resolve_spec

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


def test_resolve_args_gives_a_moved_dataset_its_yaml_folder_with_one_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `rig demo-data` in one container wrote path: /datasets/demo; the set now sits elsewhere.
    yaml_file = make_dataset(tmp_path / "moved", 2, path="/datasets/nowhere/demo")
    with caplog.at_level(logging.INFO):
        out = resolve_args([f"data={yaml_file}"], {}, mount=tmp_path / "mnt", datasets_dir=tmp_path)
    copy = Path(out[0].removeprefix("data="))
    assert copy != yaml_file and yaml.safe_load(copy.read_text())["path"] == str(tmp_path / "moved")
    assert [r.getMessage() for r in caplog.records] == [
        f"{yaml_file}: path: /datasets/nowhere/demo does not exist; the yaml's own folder holds the "
        f"dataset, so path: is {tmp_path / 'moved'}"
    ]


def test_resolve_args_moves_a_host_yaml_naming_another_machine_into_the_mount(tmp_path: Path) -> None:
    mount = tmp_path / "mnt"
    make_dataset(mount, 2, path="/datasets/demo-made-in-a-container")
    out = resolve_args(
        ["data=" + str(mount / "data.yaml")], {HOST_DIR_VAR: "/host/x"}, mount=mount, datasets_dir=tmp_path
    )
    assert yaml.safe_load(Path(out[0].removeprefix("data=")).read_text())["path"] == str(mount)


def test_resolve_args_a_path_wrong_in_both_places_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "data.yaml").write_text("path: /gone/helmets\ntrain: images/train\n")
    with pytest.raises(
        RigError, match=r"its path: /gone/helmets does not exist, and its own folder .* holds no"
    ):
        resolve_args([f"data={tmp_path}/data.yaml"], {}, mount=tmp_path / "mnt", datasets_dir=tmp_path)
