"""data= as Ultralytics must read it: a host data.yaml (`make train DATA=...`) or a moved dataset.

make mounts the yaml's folder read-only at /mnt/data and names that folder's host path in
RIG_DATA_HOST_DIR. On the host, the yaml's paths mean: no `path:` or a relative one, next to the
yaml; an absolute one, a host path. Ultralytics in the container would read a relative `path:`
under datasets_dir and an absolute host path that does not exist there, so `rig train` trains on
a copy of the yaml whose paths point into /mnt/data. The root is then found by the one rule
(rig.yolo.datasets.dataset_root), which also takes a yaml's own folder for an absolute `path:`
that does not exist there: a yaml of the container's own is left as it is unless that happened.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from rig import log
from rig.errors import RigError
from rig.yolo import datasets, ultra

_logger = log.get("data")

MOUNT = PurePosixPath("/mnt/data")
HOST_DIR_VAR = "RIG_DATA_HOST_DIR"
SPLITS = datasets.SPLITS


def _inside(path: PurePosixPath, root: PurePosixPath) -> PurePosixPath | None:
    return path.relative_to(root) if path == root or root in path.parents else None


def to_mount(value: str, host_dir: PurePosixPath, mount: PurePosixPath = MOUNT) -> str:
    """A host path under the mounted folder, as the container sees it; any other value unchanged."""
    rel = _inside(PurePosixPath(posixpath.normpath(value)), host_dir) if value.startswith("/") else None
    return value if rel is None else str(mount / rel)


def resolve_spec(
    spec: Mapping[str, Any], host_dir: PurePosixPath, mount: PurePosixPath = MOUNT
) -> dict[str, Any]:
    """The yaml as the container must read it: path: absolute, in the mount; split entries that
    name host paths under the folder moved there too (relative ones stay relative to path:)."""
    out = dict(spec)
    raw = str(spec.get("path") or "")
    if not raw:
        root = str(mount)
    elif raw.startswith("/"):
        root = to_mount(raw, host_dir, mount)
    else:
        root = posixpath.normpath(str(mount / raw))
        if _inside(PurePosixPath(root), mount) is None:
            raise RigError(
                f"data.yaml's path: {raw} leaves {host_dir}, the folder mounted for it; "
                "put data.yaml in the dataset's folder (or a folder above it)"
            )
    out["path"] = root
    for split in SPLITS:
        value = spec.get(split)
        if isinstance(value, str):
            out[split] = to_mount(value, host_dir, mount)
        elif isinstance(value, list):
            out[split] = [to_mount(str(v), host_dir, mount) for v in value]
    return out


def _read(source: Path, host: str = "") -> dict[str, Any]:
    try:
        return datasets.read_spec(source)
    except datasets.DatasetError as e:
        raise RigError(f"{e} (host folder {host})" if host else str(e)) from None


def _moved(spec: dict[str, Any], source: Path, datasets_dir: Path) -> dict[str, Any] | None:
    """spec with path: the root the one rule finds, when that is not Ultralytics' (a moved dataset,
    logged once); None when Ultralytics reads spec as rig does."""
    try:
        data = datasets.resolve(spec, source, datasets_dir)
    except datasets.DatasetError as e:
        raise RigError(str(e)) from None
    if data.moved_from is None:
        return None
    _logger.info(
        "%s: path: %s does not exist; the yaml's own folder holds the dataset, so path: is %s",
        source,
        data.moved_from,
        data.root,
    )
    return {**spec, "path": str(data.root)}


def resolve_data(value: str, host: str, mount: Path, datasets_dir: Path) -> str | None:
    """The path of a resolved copy of the yaml data= names, or None where Ultralytics reads it as
    it is (or it is not there, or a folder: the offline check and Ultralytics say so)."""
    if host and _inside(PurePosixPath(value), PurePosixPath(mount)) is not None:
        source = Path(value)
        spec = resolve_spec(_read(source, host), PurePosixPath(host), PurePosixPath(mount))
        spec = _moved(spec, source, datasets_dir) or spec
        _logger.info("%s is host folder %s's data.yaml: path: %s", value, host, spec["path"])
    else:
        found = datasets.locate(value, datasets_dir)
        if found is None or not found.is_file():
            return None
        source = found
        moved = _moved(_read(source), source, datasets_dir)
        if moved is None:
            return None
        spec = moved
    copy = Path(tempfile.mkdtemp(prefix="rig-data-")) / source.name
    copy.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(copy)


def resolve_args(
    args: Sequence[str],
    environ: Mapping[str, str] = os.environ,
    mount: Path = Path(MOUNT),
    datasets_dir: Path | None = None,
) -> list[str]:
    """Ultralytics key=value arguments with data= replaced by a resolved copy when it is a host yaml
    or a moved dataset (see the module's docstring)."""
    host = environ.get(HOST_DIR_VAR, "")
    if datasets_dir is None:
        datasets_dir = ultra.settings_dirs(environ)["datasets_dir"]
    out = list(args)
    for i, arg in enumerate(out):
        key, _, value = arg.partition("=")
        copy = resolve_data(value, host, mount, datasets_dir) if key == "data" and value else None
        if copy is not None:
            out[i] = f"data={copy}"
    return out
