"""Data yamls, read the way Ultralytics reads them: which yaml, which dataset root, which images.

The one data.yaml reader: `rig train` (and `make train DATA=`), its tuning, `rig yolo`, `rig bench`,
`rig doctor`, the node image cache's key, the offline check and `rig datasets get` all ask this
module; none reads a data yaml itself. Ultralytics' own reader, `check_det_dataset`, downloads what is missing
and runs the yaml's download script, so a check cannot call it; the rules here are its rules
(Ultralytics 8.4: `check_det_dataset` in ultralytics/data/utils.py for the root and the splits,
`BaseDataset.get_img_files` in ultralytics/data/base.py for the images), and the image suffixes
are its own `IMG_FORMATS`.

Datasets move between machines, so one rule is added to Ultralytics' for the root: an absolute
`path:` that does not exist, where the yaml's own folder holds the train and val splits, is that
folder (`moved_from` keeps the path as written; `portable` gives Ultralytics a copy that says so).

What Ultralytics would only meet inside the trainer, or block on, is refused here in one line
(`check`): a yaml, split entry or list file that is not a regular file or folder (a FIFO blocks
its reader), a yaml over MAX_YAML_BYTES (parsing a 100 MB list takes minutes and gigabytes), a
split without images. An image that is no regular file is no image: see rig.yolo.ultra's
`screened_files` for Ultralytics' own scan.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from rig import safefs
from rig.yolo import ultra

SPLITS = ("train", "val", "test", "minival")  # the keys Ultralytics resolves under the root
MOVABLE_SPLITS = ("train", "val")  # what the yaml's folder must hold to stand in for a missing path:
CHECKED_SPLITS = ("train", "val")  # what every training run reads
# Ultralytics' largest dataset yamls (Open Images V7, Objects365) are about 40 KB; a yaml names
# folders and list files, never the images themselves.
MAX_YAML_BYTES = 1 << 20
MAX_LIST_BYTES = 1 << 30  # a list file of a few million image paths


class DatasetError(ValueError):
    """A data yaml that cannot be used; the message names the file and says why."""


@dataclass(frozen=True)
class DataYaml:
    file: Path
    root: Path  # the dataset root: `path:` resolved as Ultralytics does
    train: tuple[Path, ...]  # the train split's entries (folders, lists of files), resolved
    moved_from: Path | None = None  # path: as written, when the yaml's folder stands in for it

    def missing_train(self) -> Path | None:
        return next((p for p in self.train if not p.exists()), None)


def is_image(path: Path) -> bool:
    """Whether Ultralytics takes the file for an image (by its suffix, any case: rig.yolo.ultra's list)."""
    _, dot, suffix = path.name.rpartition(".")
    return bool(dot) and suffix.lower() in ultra.image_formats()


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


@dataclass(frozen=True)
class Root:
    path: Path
    moved_from: Path | None = None  # an absolute path: that does not exist; path is the yaml's folder


def ultralytics_root(path_key: object, yaml_file: Path, datasets_dir: Path) -> Path:
    """Ultralytics' rule for a data yaml's root: `path:` (else the yaml's folder), taken as it is
    when it exists (relative to the working directory) or is absolute, else under datasets_dir."""
    root = Path(str(path_key)) if path_key else yaml_file.parent
    if not root.exists() and not root.is_absolute():
        root = datasets_dir / root
    return root


def _splits(spec: Mapping[str, object], root: Path, keys: tuple[str, ...]) -> list[Path]:
    return [p for k in keys if spec.get(k) for p in split_paths(root, spec[k])]


def dataset_root(spec: Mapping[str, object], yaml_file: Path, datasets_dir: Path) -> Root:
    """The dataset root, the one rule every reader uses: Ultralytics' (`ultralytics_root`), except
    that an absolute `path:` that does not exist, where the yaml's own folder holds the train and
    val splits, is the yaml's folder (a dataset moved to another machine or path)."""
    raw = spec.get("path")
    root = ultralytics_root(raw, yaml_file, datasets_dir)
    if not raw or not Path(str(raw)).is_absolute() or root.exists():
        return Root(root)
    there = _splits(spec, root, MOVABLE_SPLITS)
    here = _splits(spec, yaml_file.parent, MOVABLE_SPLITS)
    if there and not all(p.exists() for p in there) and here and all(p.exists() for p in here):
        return Root(yaml_file.absolute().parent, moved_from=root)
    return Root(root)


def split_paths(root: Path, entry: object) -> tuple[Path, ...]:
    """A split's entries under the root, resolved (absolute, no links) as Ultralytics resolves them,
    so the image paths are its own (the node image cache's key); a missing '../x' is also looked for
    as 'x' (Ultralytics)."""
    if isinstance(entry, list):
        return tuple((root / str(e)).resolve() for e in entry)
    text = str(entry)
    path = (root / text).resolve()
    if not path.exists() and text.startswith("../"):
        path = (root / text[3:]).resolve()
    return (path,)


def read_spec(yaml_file: Path) -> dict[str, object]:
    """The yaml's mapping; DatasetError when it is unreadable, not a regular file (checked before
    anything can block on it), over MAX_YAML_BYTES (before it is parsed) or not a mapping."""
    try:
        text = safefs.read_input(yaml_file, MAX_YAML_BYTES).decode()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{yaml_file} is unreadable: {e}".replace("\n", " ")) from None
    except safefs.Skipped as e:
        raise DatasetError(f"{yaml_file}: {e}: {_YAML_HOW}") from None
    try:
        spec = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise DatasetError(f"{yaml_file} is unreadable: {e}".replace("\n", " ")) from None
    if not isinstance(spec, dict):
        raise DatasetError(f"{yaml_file} is not a dataset yaml (no mapping of train:, val:, names:)")
    return spec


_YAML_HOW = (
    f"data= names a dataset yaml, a regular file of at most {MAX_YAML_BYTES >> 20} MiB that names "
    "the image folders (or .txt lists of images, one path per line)"
)


def load(yaml_file: Path, datasets_dir: Path) -> DataYaml:
    """Read a data yaml's root and train split; DatasetError when it cannot be used (see `resolve`)."""
    return resolve(read_spec(yaml_file), yaml_file, datasets_dir)


def resolve(spec: Mapping[str, object], yaml_file: Path, datasets_dir: Path) -> DataYaml:
    """The root and train split of a yaml's mapping read from yaml_file; DatasetError when it cannot
    be used, including an absolute `path:` that does not exist where the yaml's folder does not hold
    the splits either."""
    if not spec.get("train"):
        raise DatasetError(f"{yaml_file} has no 'train:' entry")
    root = dataset_root(spec, yaml_file, datasets_dir)
    data = DataYaml(yaml_file, root.path, split_paths(root.path, spec["train"]), root.moved_from)
    raw = spec.get("path")
    missing = data.missing_train()
    if raw and Path(str(raw)).is_absolute() and not root.path.exists() and missing is not None:
        train = spec["train"] if isinstance(spec["train"], str) else missing.name
        raise DatasetError(
            f"{yaml_file}: its path: {root.path} does not exist, and its own folder {yaml_file.parent} "
            f"holds no {train} either: set path: to the dataset's folder, or remove path: and keep "
            "data.yaml in the dataset's folder"
        )
    return data


def images_in(entry: Path) -> list[Path]:
    """The images of one split entry, as Ultralytics lists them: a folder's files, recursively,
    except what is there but is no file (a FIFO or a device named x.jpg: its reader would block); a
    list file's lines (a line starting with ./ is relative to the file's folder); [] when there is
    nothing."""
    return sorted(_images(entry))


def _images(entry: Path) -> Iterator[Path]:
    if entry.is_dir():
        return (p for p in entry.rglob("*.*") if is_image(p) and (p.is_file() or not p.exists()))
    if not entry.is_file():
        return iter(())
    try:
        lines = safefs.read_input(entry, MAX_LIST_BYTES).decode("utf-8-sig").strip().splitlines()
    except (OSError, UnicodeDecodeError, safefs.Skipped):
        return iter(())
    parent = str(entry.parent) + os.sep
    found = (Path(s.replace("./", parent, 1) if s.startswith("./") else s) for s in lines)
    return (p for p in found if is_image(p))


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


def check(data: str, datasets_dir: Path) -> None:
    """DatasetError for a data= that would block a reader or fail inside the trainer (see the
    module's docstring); what does not exist yet is left to Ultralytics (it downloads, or says so).
    A folder (a classification dataset) is Ultralytics' to check."""
    path = locate(data, datasets_dir)
    if path is None or path.is_dir():
        return
    spec = read_spec(path)
    if not spec.get("train"):
        raise DatasetError(f"{path} has no 'train:' entry")
    root = dataset_root(spec, path, datasets_dir).path
    for split in CHECKED_SPLITS:
        if spec.get(split):
            _check_split(path, split, split_paths(root, spec[split]))


def _check_split(yaml_file: Path, split: str, entries: tuple[Path, ...]) -> None:
    for entry in entries:
        what = safefs.not_regular(entry)
        if what not in (None, "nothing", "a folder"):
            raise DatasetError(
                f"{yaml_file}: {split}: {entry} is {what}: a split is a folder of images or a text "
                "file listing them, one path per line"
            )
    if all(e.exists() for e in entries) and next((i for e in entries for i in _images(e)), None) is None:
        where = ", ".join(str(e) for e in entries)
        raise DatasetError(
            f"{yaml_file}: {split}: no images in {where} (files ending in "
            f".{', .'.join(sorted(ultra.image_formats()))})"
        )
