"""Ultralytics' named datasets (coco8.yaml, coco128.yaml ...) into the `datasets` volume, on request.

The yaml shipped with the pinned Ultralytics says where the dataset lives (`path:`, under
datasets_dir) and where its zip is (`download:`). `rig datasets get` fetches that zip (rig.yolo.assets:
checked, renamed when complete), unpacks it beside its target and moves it into place, which is
what Ultralytics itself would do online at the first `data=coco8.yaml`.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.yolo import assets, datasets

_logger = log.get("datasets")


@dataclass(frozen=True)
class Named:
    """A dataset as its yaml describes it: where it must end up and the zip that holds it."""

    yaml: Path
    root: Path
    download: str


def describe(yaml_path: Path, spec: Any, datasets_dir: Path) -> Named:
    """Where the dataset goes (the one rule, rig.yolo.datasets.dataset_root: a relative path: that
    is not there from the working directory is under datasets_dir) and its zip."""
    if not isinstance(spec, dict) or not spec.get("path"):
        raise RigError(f"{yaml_path.name} has no 'path:' entry: not a dataset rig can fetch")
    download = str(spec.get("download") or "")
    first = download.strip().splitlines()[0] if download.strip() else ""
    if not first.startswith(("http://", "https://")) or len(download.strip().splitlines()) > 1:
        raise RigError(
            f"{yaml_path.name}: its download: is {'a script' if first else 'empty'}, not a zip URL; "
            "rig fetches zip datasets (coco8.yaml, coco128.yaml, coco8-seg.yaml ...)"
        )
    return Named(yaml_path, datasets.dataset_root(spec, yaml_path, datasets_dir).path, first)


def find(name: str, datasets_dir: Path) -> Named:
    """The dataset yaml by Ultralytics' name (coco8.yaml) or a path to one."""
    given = Path(name)
    path = given if given.is_file() else datasets.packaged_yaml(name) if len(given.parts) == 1 else None
    if path is None:
        raise RigError(f"no dataset named {name}: give one of Ultralytics' (coco8.yaml, coco128.yaml ...)")
    try:
        spec = datasets.read_spec(path)
    except datasets.DatasetError as e:
        raise RigError(str(e)) from None
    return describe(path, spec, datasets_dir)


def unpack(archive: Path, named: Named) -> None:
    """Unzip beside the target, then move what the zip holds into place; the target must appear."""
    parent = named.root.parent
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{named.root.name}."))
    try:
        with zipfile.ZipFile(archive) as z:
            z.extractall(staging)  # zipfile drops absolute paths and '..' and never makes links
        top = [p.name for p in staging.iterdir() if p.name != "__MACOSX"]
        if named.root.name not in top:
            holds = ", ".join(sorted(top)) or "nothing"
            raise RigError(f"{archive.name} holds {holds}, not {named.root.name}/")
        for entry in top:
            if not (parent / entry).exists():
                (staging / entry).rename(parent / entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def get(request: assets.Request, datasets_dir: Path, base: str | None, force: bool = False) -> Path:
    named = find(request.name, datasets_dir)
    if named.root.exists() and not force:
        _logger.info("%s is already at %s (--force fetches it again)", request.name, named.root)
        return named.root
    if not datasets_dir.is_dir():
        raise RigError(f"{datasets_dir} does not exist; mount the `datasets` volume or a host folder there")
    named.root.parent.mkdir(parents=True, exist_ok=True)
    url = assets.dataset_url(named.download, base)
    archive = named.root.parent / f".{named.root.name}.zip"
    try:
        assets.fetch(url, archive, request.sha256)
    except assets.Unreachable as e:
        raise RigError(
            f"{e}: offline, unzip {Path(url).name} (from {url}) into {named.root.parent} so that "
            f"{named.root} holds its images/ and labels/"
        ) from None
    try:
        if force and named.root.exists():
            shutil.rmtree(named.root)
        unpack(archive, named)
    finally:
        archive.unlink(missing_ok=True)
    _logger.info("%s ready at %s; train with data=%s", request.name, named.root, named.yaml.name)
    return named.root
