"""Data yamls, read the way Ultralytics reads them: which yaml, which dataset root, which images.

`rig train`'s tuning, `rig bench`, `rig doctor` and the offline check all ask this module; none
reads a data yaml itself. Ultralytics' own reader, `check_det_dataset`, downloads what is missing
and runs the yaml's download script, so a check cannot call it; the rules here are its rules
(Ultralytics 8.4: `check_det_dataset` in ultralytics/data/utils.py for the root and the splits,
`BaseDataset.get_img_files` in ultralytics/data/base.py for the images), and the image suffixes
are its own `IMG_FORMATS`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from rig.yolo import ultra


class DatasetError(ValueError):
    """A data yaml that cannot be used; the message names the file and says why."""


@dataclass(frozen=True)
class DataYaml:
    file: Path
    root: Path  # the dataset root: `path:` resolved as Ultralytics does
    train: tuple[Path, ...]  # the train split's entries (folders, lists of files), resolved

    def missing_train(self) -> Path | None:
        return next((p for p in self.train if not p.exists()), None)


def packaged_yaml(name: str) -> Path | None:
    """A dataset yaml shipped inside Ultralytics (coco8.yaml ...), found without importing it."""
    for root in ultra.package_dirs():
        hits = list((root / "cfg/datasets").rglob(Path(name).name))
        if hits:
            return hits[0]
    return None


def candidates(data: str, datasets_dir: Path) -> list[Path]:
    """Where data= may be: as given, then (relative) in the datasets folder."""
    given = Path(data)
    return [given] if given.is_absolute() else [given, datasets_dir / given]


def locate(data: str, datasets_dir: Path) -> Path | None:
    """The data yaml (or folder) data= names: the first of `candidates` that exists, else a yaml
    Ultralytics ships under that bare name (coco8.yaml); None when there is none."""
    found = next((p for p in candidates(data, datasets_dir) if p.exists()), None)
    if found is None and len(Path(data).parts) == 1 and not Path(data).is_absolute():
        found = packaged_yaml(data)
    return found


def dataset_root(path_key: object, yaml_file: Path, datasets_dir: Path) -> Path:
    """Ultralytics' rule for a data yaml's root: `path:` (else the yaml's folder), taken as it is
    when it exists (relative to the working directory) or is absolute, else under datasets_dir."""
    root = Path(str(path_key)) if path_key else yaml_file.parent
    if not root.exists() and not root.is_absolute():
        root = datasets_dir / root
    return root


def split_paths(root: Path, entry: object) -> tuple[Path, ...]:
    """A split's entries under the root; a missing '../x' is also looked for as 'x' (Ultralytics)."""
    if isinstance(entry, list):
        return tuple(root / str(e) for e in entry)
    text = str(entry)
    path = root / text
    if not path.exists() and text.startswith("../"):
        path = root / text[3:]
    return (path,)


def load(yaml_file: Path, datasets_dir: Path) -> DataYaml:
    """Read a data yaml's root and train split; DatasetError when it cannot be used."""
    try:
        spec = yaml.safe_load(yaml_file.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise DatasetError(f"{yaml_file} is unreadable: {e}".replace("\n", " ")) from None
    if not isinstance(spec, dict) or not spec.get("train"):
        raise DatasetError(f"{yaml_file} has no 'train:' entry")
    root = dataset_root(spec.get("path"), yaml_file, datasets_dir)
    return DataYaml(yaml_file, root, split_paths(root, spec["train"]))


def images_in(entry: Path) -> list[Path]:
    """The images of one split entry, as Ultralytics lists them: a folder's, recursively; a file's
    lines (a line starting with ./ is relative to the file's folder); [] when there is nothing."""
    if entry.is_dir():
        found = [p for p in entry.rglob("*.*") if not p.is_dir()]
    elif entry.is_file():
        try:
            lines = entry.read_text(encoding="utf-8-sig").strip().splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        parent = str(entry.parent) + os.sep
        found = [Path(s.replace("./", parent, 1) if s.startswith("./") else s) for s in lines]
    else:
        return []
    formats = ultra.image_formats()
    return sorted(p for p in found if p.name.rpartition(".")[-1].lower() in formats)


def train_images(data: DataYaml) -> list[Path]:
    return [image for entry in data.train for image in images_in(entry)]


def count_train_images(data: str, datasets_dir: Path) -> int | None:
    """Images in a data yaml's train split; None when unknown (no yaml, unreadable, empty)."""
    path = locate(data, datasets_dir)
    if path is None or path.is_dir():
        return None
    try:
        return len(train_images(load(path, datasets_dir))) or None
    except DatasetError:
        return None
