"""Data yamls read as Ultralytics reads them, by every rig module that reads one."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.observe import doctor_gather
from rig.yolo import datasets, offline, tuning

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
    decisions = tuning.decide_for(tuning.read_resources(root), dataset, user_args={}, rank_cpus=1, nranks=1)
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
