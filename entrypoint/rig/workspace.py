"""Seed the baked notebooks into the user's workspace without ever overwriting their edits.

A manifest in the destination (`.rig-seeded.json`, hidden in Jupyter) records the hash of every
file as it was seeded. On each start:
- a file never seeded is copied;
- a seeded file the user has not touched is updated when the image ships a newer version;
- a file the user edited, or deleted, is left as it is (deleting a notebook is a choice too).
`rig serve` runs as root, so new files get the owner of the workspace they land in.
"""

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from rig import log

_logger = log.get("workspace")

MANIFEST = ".rig-seeded.json"
NOTEBOOK_SUFFIXES = (".ipynb",)


class Action(Enum):
    COPY = "copy"  # not there and never seeded
    UPDATE = "update"  # seeded, untouched by the user, and the image has a newer version
    KEEP_EDITED = "keep-edited"  # the user changed it: theirs wins
    KEEP_DELETED = "keep-deleted"  # the user deleted it: stays deleted
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class FileState:
    """One baked file: its hash in the image, in the workspace (None: absent), and as last seeded."""

    name: str
    src_hash: str
    dst_hash: str | None
    seeded_hash: str | None


def decide(state: FileState) -> Action:
    """What to do with one baked file; a pure function of the three hashes."""
    if state.dst_hash is None:
        return Action.COPY if state.seeded_hash is None else Action.KEEP_DELETED
    if state.dst_hash == state.src_hash:
        return Action.UNCHANGED
    if state.seeded_hash is not None and state.dst_hash == state.seeded_hash:
        return Action.UPDATE
    return Action.KEEP_EDITED


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_manifest(dst: Path) -> dict[str, str]:
    try:
        raw = json.loads((dst / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def _owner_of_nearest(path: Path) -> tuple[int, int]:
    """uid/gid of the nearest existing ancestor: the workspace volume, owned by the user."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            st = candidate.stat()
            return st.st_uid, st.st_gid
    return os.getuid(), os.getgid()


def _write_atomic(target: Path, data: bytes, owner: tuple[int, int] | None) -> None:
    # A temporary file renamed over the target: a symlink planted at the target is replaced,
    # never followed, and a crash leaves the old file or the new one, not half of each.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".rig-seed-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def seed_notebooks(
    src: Path = Path("/opt/rig/notebooks"),
    dst: Path = Path("/workspace/notebooks"),
    owner: tuple[int, int] | None = None,
) -> dict[str, Action]:
    """Copy the baked notebooks from src into dst; return what was done with each file.

    owner: uid/gid for created files; default: the owner of dst's nearest existing ancestor when
    running as root, else whoever runs this.
    """
    if not src.is_dir():
        _logger.warning("no baked notebooks at %s; nothing to seed", src)
        return {}
    if dst.is_symlink():
        _logger.warning("%s is a symlink; not seeding notebooks into it", dst)
        return {}
    if owner is None and os.geteuid() == 0:
        owner = _owner_of_nearest(dst)
    if not dst.exists():
        dst.mkdir(parents=True, mode=0o755)
        if owner is not None:
            os.chown(dst, *owner)
    manifest = _read_manifest(dst)
    results: dict[str, Action] = {}
    for path in sorted(p for p in src.iterdir() if p.is_file() and p.suffix in NOTEBOOK_SUFFIXES):
        target = dst / path.name
        data = path.read_bytes()
        src_hash = hashlib.sha256(data).hexdigest()
        dst_hash = _sha256(target) if target.is_file() and not target.is_symlink() else None
        if dst_hash is None and (target.exists() or target.is_symlink()):
            results[path.name] = Action.KEEP_EDITED  # a directory or link of that name: the user's
            continue
        action = decide(FileState(path.name, src_hash, dst_hash, manifest.get(path.name)))
        if action in (Action.COPY, Action.UPDATE):
            _write_atomic(target, data, owner)
            manifest[path.name] = src_hash
        elif action is Action.UNCHANGED:
            manifest[path.name] = src_hash
        elif action is Action.KEEP_EDITED:
            _logger.info("kept your edited %s; the image's version is %s", target, path)
        results[path.name] = action
    _write_atomic(dst / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode(), owner)
    copied = [n for n, a in results.items() if a in (Action.COPY, Action.UPDATE)]
    if copied:
        _logger.info("notebooks in %s: %s", dst, ", ".join(copied))
    return results
