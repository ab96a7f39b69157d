"""Data yamls read as Ultralytics reads them, by every rig module that reads one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rig.observe import doctor_gather
from rig.yolo import datasets, offline, tuning

from tests.helpers.bounded import bounded
from tests.helpers.datasets import make_dataset


@pytest.mark.parametrize("layout", ["dir", "txt"])
def test_count_train_images(tmp_path: Path, layout: str) -> None:
    assert datasets.count_train_images(str(make_dataset(tmp_path / "ds", 7, layout=layout)), tmp_path) == 7


def test_count_relative_to_datasets_dir(tmp_path: Path) -> None:
    make_dataset(tmp_path / "datasets/demo", 3, path="demo")
    assert datasets.count_train_images("demo/data.yaml", tmp_path / "datasets") == 3


@pytest.mark.parametrize("data", ["coco8.yaml", "/nonexistent/data.yaml"])
def test_count_unknown(tmp_path: Path, data: str) -> None:
    assert datasets.count_train_images(data, tmp_path) is None


def test_a_missing_parent_prefix_is_dropped_as_ultralytics_does(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    assert datasets.split_paths(tmp_path, "../images") == (tmp_path / "images",)
    assert datasets.split_paths(tmp_path, ["a", "b"]) == (tmp_path / "a", tmp_path / "b")


def test_list_files_resolve_dot_slash_lines_against_their_folder(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "list.txt").write_text("./a.jpg\n/abs/b.PNG\n./notes.md\n")
    assert datasets.images_in(tmp_path / "list.txt") == [Path("/abs/b.PNG"), tmp_path / "a.jpg"]


def _found_by_every_reader(data: str, datasets_dir: Path) -> dict[str, object]:
    """What tuning, the offline check and the doctor make of one data= (doctor: root = datasets' parent)."""
    root = datasets_dir.parent
    dataset = tuning.size_dataset(data, sys_root=root, datasets_dir=datasets_dir)
    node = tuning.Node(tuning.read_resources(root), dataset, rank_cpus=1, nranks=1)
    decisions = tuning.decide_for(node, user_args={}, rank_batch=16)
    cache = next(d.reason for d in decisions if d.key == "cache")
    facts = doctor_gather.gather_dataset(data, root, batch=16, imgsz=64, nranks=1, rank_cpus=1)
    return {
        "tuning": cache.split(" images")[0] if " images" in cache else cache,
        "offline": offline.missing_data(data, datasets_dir),
        "doctor": facts.images if facts.error is None else facts.error,
    }


def test_a_relative_path_that_exists_from_the_working_directory_is_used_by_every_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ultralytics takes `path: mine` as it is when it exists (from the working directory), and only
    # otherwise looks under datasets_dir; tuning, the offline check and the doctor used to differ.
    (tmp_path / "datasets").mkdir()
    make_dataset(tmp_path / "work/mine", 4, path="mine")
    monkeypatch.chdir(tmp_path / "work")
    assert _found_by_every_reader("mine/data.yaml", tmp_path / "datasets") == {
        "tuning": "4",
        "offline": None,
        "doctor": 4,
    }


def test_a_relative_path_is_not_looked_for_beside_the_yaml_by_any_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `path: demo` that is not there from the working directory is datasets_dir/demo for Ultralytics,
    # even when a folder of that name sits beside the yaml (the doctor used to count that one).
    make_dataset(tmp_path / "datasets/demo", 5, path="demo")
    make_dataset(tmp_path / "elsewhere/demo", 2)
    (tmp_path / "elsewhere/data.yaml").write_text("path: demo\ntrain: images/train\nnames: {0: a}\n")
    monkeypatch.chdir(tmp_path)
    data = str(tmp_path / "elsewhere/data.yaml")
    assert _found_by_every_reader(data, tmp_path / "datasets") == {
        "tuning": "5",
        "offline": None,
        "doctor": 5,
    }


# A dataset moved to another machine or path: its absolute path: is gone, its yaml's folder holds it.


def test_a_missing_absolute_path_is_the_yaml_folder_when_that_holds_the_splits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yaml_file = make_dataset(tmp_path / "here", 3, path="/made/elsewhere/helmets")
    data = datasets.load(yaml_file, tmp_path / "datasets")
    assert (data.root, data.moved_from) == (tmp_path / "here", Path("/made/elsewhere/helmets"))
    monkeypatch.chdir(tmp_path)
    assert _found_by_every_reader(str(yaml_file), tmp_path / "datasets") == {
        "tuning": "3",
        "offline": None,
        "doctor": 3,
    }


def test_an_absolute_path_that_exists_is_kept_even_when_the_yaml_folder_holds_splits(tmp_path: Path) -> None:
    make_dataset(tmp_path / "real", 2)
    yaml_file = make_dataset(tmp_path / "copy", 5, path=str(tmp_path / "real"))
    data = datasets.load(yaml_file, tmp_path)
    assert (data.root, data.moved_from, len(datasets.train_images(data))) == (tmp_path / "real", None, 2)


def test_a_relative_path_is_never_moved(tmp_path: Path) -> None:
    yaml_file = make_dataset(tmp_path / "here", 3, path="gone")
    data = datasets.load(yaml_file, tmp_path / "datasets")
    assert (data.root, data.moved_from) == (tmp_path / "datasets/gone", None)


def test_a_path_wrong_in_both_places_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    yaml_file = tmp_path / "here/data.yaml"
    yaml_file.write_text("path: /made/elsewhere/helmets\ntrain: images/train\nval: images/val\n")
    with pytest.raises(datasets.DatasetError) as e:
        datasets.load(yaml_file, tmp_path)
    message = str(e.value)
    assert "\n" not in message
    assert message == (
        f"{yaml_file}: its path: /made/elsewhere/helmets does not exist, and its own folder "
        f"{tmp_path / 'here'} holds no images/train either: set path: to the dataset's folder, or "
        "remove path: and keep data.yaml in the dataset's folder"
    )
    assert offline.missing_data(str(yaml_file), tmp_path) == f"dataset yaml {message}"


def test_absolute_split_entries_keep_a_missing_path_as_ultralytics_reads_it(tmp_path: Path) -> None:
    make_dataset(tmp_path / "real", 2)
    (tmp_path / "yaml").mkdir()
    yaml_file = tmp_path / "yaml/data.yaml"
    yaml_file.write_text(f"path: /gone\ntrain: {tmp_path}/real/images/train\n")
    data = datasets.load(yaml_file, tmp_path)
    assert (data.root, data.moved_from, len(datasets.train_images(data))) == (Path("/gone"), None, 2)


# ------------------------------------------------------------------- inputs that would hang or flood


def _yaml(root: Path, train: str, val: str = "images/train") -> Path:
    (root / "bad.yaml").write_text(f"path: {root}\ntrain: {train}\nval: {val}\nnames: {{0: a}}\n")
    return root / "bad.yaml"


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (
            "fifo-yaml",
            "data.yaml: it is a FIFO, not a regular file: data= names a dataset yaml, a regular file",
        ),
        ("big-yaml", "data.yaml: it is larger than 1 MiB (2000011 bytes)"),
        ("folder-yaml", None),  # a folder: a classification dataset, Ultralytics' to check
        (
            "train-fifo",
            "bad.yaml: train: {root}/train.txt is a FIFO: a split is a folder of images or a text",
        ),
        ("val-fifo", "bad.yaml: val: {root}/val.txt is a FIFO"),
        ("empty-train", "bad.yaml: train: no images in {root}/images/empty (files ending in .avif, .bmp"),
        ("empty-val", "bad.yaml: val: no images in {root}/images/empty"),
        ("missing-train", None),  # not there yet: Ultralytics downloads it, or says so
        ("fine", None),
    ],
)
def test_check_refuses_what_would_block_or_fail_in_the_trainer(
    tmp_path: Path, plant: str, message: str | None
) -> None:
    root = tmp_path / "ds"
    data = make_dataset(root, 3)
    (root / "images/empty").mkdir()
    (root / "images/empty/notes.md").write_text("no image")
    if plant == "fifo-yaml":
        data.unlink()
        os.mkfifo(data)
    elif plant == "big-yaml":
        data.write_text("train: [" + "0," * 1_000_000 + "0]\n")
    elif plant == "folder-yaml":
        data = root
    elif plant in ("train-fifo", "val-fifo"):
        os.mkfifo(root / f"{plant[:-5]}.txt")
        data = _yaml(root, "train.txt") if plant == "train-fifo" else _yaml(root, "images/train", "val.txt")
    elif plant in ("empty-train", "empty-val"):
        data = (
            _yaml(root, "images/empty")
            if plant == "empty-train"
            else _yaml(root, "images/train", "images/empty")
        )
    elif plant == "missing-train":
        data = _yaml(root, "images/nowhere")
    if message is None:
        bounded(lambda: datasets.check(str(data), tmp_path))
        return
    with pytest.raises(datasets.DatasetError) as e:
        bounded(lambda: datasets.check(str(data), tmp_path))
    assert message.format(root=root) in str(e.value) and "\n" not in str(e.value)


def test_a_fifo_named_like_an_image_is_no_image(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "ds", 3)
    os.mkfifo(tmp_path / "ds/images/train/zz.jpg")
    (tmp_path / "ds/images/train/gone.jpg").symlink_to(tmp_path / "nowhere.jpg")  # listed: Ultralytics says
    assert datasets.count_train_images(str(data), tmp_path) == 4
    facts = bounded(
        lambda: doctor_gather.gather_dataset(str(data), tmp_path, batch=16, imgsz=64, nranks=1, rank_cpus=1)
    )
    assert facts.images == 4 and facts.unreadable == (str(tmp_path / "ds/images/train/gone.jpg"),)


def test_rig_train_refuses_a_fifo_yaml_before_making_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rig import cli

    os.mkfifo(tmp_path / "data.yaml")
    runs = tmp_path / "runs"
    monkeypatch.setattr(os, "execvpe", lambda *a: pytest.fail("launched"))
    argv = ["train", "device=cpu", f"data={tmp_path / 'data.yaml'}", "model=m.yaml", f"project={runs}"]
    assert bounded(lambda: cli.main(argv)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("INFO")]
    assert len(err) == 1 and err[0].startswith(f"ERROR rig: {tmp_path / 'data.yaml'}: it is a FIFO"), err
    assert not runs.exists()
