"""A data.yaml from the host: `make train DATA=/data/helmets/data.yaml`.

make mounts the yaml's folder read-only at /mnt/data and names that folder's host path in
RIG_DATA_HOST_DIR. On the host, the yaml's paths mean: no `path:` or a relative one, next to the
yaml; an absolute one, a host path. Ultralytics in the container would read a relative `path:`
under datasets_dir and an absolute host path that does not exist there, so `rig train` trains on
a copy of the yaml whose paths point into /mnt/data. A yaml of the container's own is left as it is.
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

_logger = log.get("data")

MOUNT = PurePosixPath("/mnt/data")
HOST_DIR_VAR = "RIG_DATA_HOST_DIR"
SPLITS = ("train", "val", "test", "minival")


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


def resolve_args(
    args: Sequence[str], environ: Mapping[str, str] = os.environ, mount: Path = Path(MOUNT)
) -> list[str]:
    """Ultralytics key=value arguments with data= replaced by a resolved copy when it is a host yaml."""
    host = environ.get(HOST_DIR_VAR, "")
    out = list(args)
    for i, arg in enumerate(out):
        key, _, value = arg.partition("=")
        if key != "data" or not host or _inside(PurePosixPath(value), PurePosixPath(mount)) is None:
            continue
        source = Path(value)
        try:
            spec = yaml.safe_load(source.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise RigError(f"{source} (host {host}) is unreadable: {e}".replace("\n", " ")) from None
        if not isinstance(spec, dict):
            raise RigError(f"{source} (host {host}) is not a dataset yaml")
        resolved = resolve_spec(spec, PurePosixPath(host), PurePosixPath(mount))
        copy = Path(tempfile.mkdtemp(prefix="rig-data-")) / source.name
        copy.write_text(yaml.safe_dump(resolved, sort_keys=False))
        _logger.info("%s is host folder %s's data.yaml: path: %s", value, host, resolved["path"])
        out[i] = f"data={copy}"
    return out
