"""Seed the baked notebooks into the user's workspace without ever overwriting their edits.

A manifest in the destination (`.rig-seeded.json`, hidden in Jupyter) records the hash of every
file as it was seeded. On each start:
- a file never seeded is copied;
- a seeded file the user has not touched is updated when the image ships a newer version;
- a file the user edited, or deleted, is left as it is (deleting a notebook is a choice too).
`rig serve` runs as root; it does all of this in a child process that is user yolo first
(`prepare`), and every step works on descriptors without following links (rig.safefs).
"""

import hashlib
import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from rig import log, paths, safefs
from rig.workstation import asuser, users
from rig.yolo import settings

_logger = log.get("workspace")
NOTEBOOKS = paths.OPT / "notebooks"  # the baked notebooks

MANIFEST = ".rig-seeded.json"
NOTEBOOK_SUFFIXES = (".ipynb",)
# A notebook or manifest above these sizes is not ours to hash (a 1 TB sparse file is the user's).
MAX_NOTEBOOK_BYTES = 64 << 20
MAX_MANIFEST_BYTES = 1 << 20
PREPARE_TIMEOUT = 20.0


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


def _read_manifest(nb_fd: int) -> dict[str, str]:
    """The manifest's hashes; {} when absent or unreadable as JSON. Skipped when it is not a file."""
    data = safefs.read_regular(MANIFEST, nb_fd, MAX_MANIFEST_BYTES)
    if data is None:
        return {}
    try:
        raw = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def _skipped(path: Path, why: object, fix: str) -> None:
    _logger.warning("skipped %s: %s; %s", path, why, fix)


def seed_notebooks(src: Path = NOTEBOOKS, dst: Path = paths.WORKSPACE / "notebooks") -> dict[str, Action]:
    """Copy the baked notebooks from src into dst; return what was done with each file.

    dst is the user's: nothing there is followed or trusted. Whatever is found where a folder or a
    file is expected (a link, a FIFO, a device, a huge file) is left alone with one WARNING.
    """
    if not src.is_dir():
        _logger.warning("no baked notebooks at %s; nothing to seed", src)
        return {}
    try:
        parent_fd = safefs.open_dir(dst.parent)
    except (OSError, safefs.Skipped) as e:
        _skipped(dst, e, "the notebooks were not copied")
        return {}
    try:
        try:
            nb_fd = safefs.ensure_dir(dst.name, parent_fd)
        except (OSError, safefs.Skipped) as e:
            _skipped(dst, e, "move it away to get the notebooks")
            return {}
        try:
            return _seed_into(src, dst, nb_fd)
        finally:
            os.close(nb_fd)
    finally:
        os.close(parent_fd)


def _seed_into(src: Path, dst: Path, nb_fd: int) -> dict[str, Action]:
    try:
        manifest = _read_manifest(nb_fd)
    except (OSError, safefs.Skipped) as e:
        _skipped(dst / MANIFEST, e, "remove it to have the notebooks seeded again")
        return {}
    results: dict[str, Action] = {}
    for path in sorted(p for p in src.iterdir() if p.is_file() and p.suffix in NOTEBOOK_SUFFIXES):
        data = path.read_bytes()  # the image's own file
        src_hash = hashlib.sha256(data).hexdigest()
        try:
            current = safefs.read_regular(path.name, nb_fd, MAX_NOTEBOOK_BYTES)
        except (OSError, safefs.Skipped) as e:
            _skipped(dst / path.name, e, f"the image's version is {path}")
            results[path.name] = Action.KEEP_EDITED
            continue
        dst_hash = None if current is None else hashlib.sha256(current).hexdigest()
        action = decide(FileState(path.name, src_hash, dst_hash, manifest.get(path.name)))
        if action in (Action.COPY, Action.UPDATE):
            try:
                safefs.write_atomic(path.name, data, nb_fd)
            except (OSError, safefs.Skipped) as e:
                _skipped(dst / path.name, e, f"the image's version is {path}")
                results[path.name] = Action.KEEP_EDITED
                continue
            manifest[path.name] = src_hash
        elif action is Action.UNCHANGED:
            manifest[path.name] = src_hash
        elif action is Action.KEEP_EDITED:
            _logger.info("kept your edited %s; the image's version is %s", dst / path.name, path)
        results[path.name] = action
    try:
        text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        safefs.write_atomic(MANIFEST, text.encode(), nb_fd)
    except (OSError, safefs.Skipped) as e:
        _skipped(dst / MANIFEST, e, "remove it to have the notebooks seeded again")
    copied = [n for n, a in results.items() if a in (Action.COPY, Action.UPDATE)]
    if copied:
        _logger.info("notebooks in %s: %s", dst, ", ".join(copied))
    return results


def prepare_as_user(workspace: Path = paths.WORKSPACE, notebooks: Path = NOTEBOOKS) -> None:
    """runs/ (TensorBoard's and training's folder), the notebooks and Ultralytics' settings (when
    YOLO_CONFIG_DIR is in the workspace), as whoever calls this."""
    try:
        with safefs.opened_dir(workspace) as wfd:
            os.close(safefs.ensure_dir("runs", wfd))
    except (OSError, safefs.Skipped) as e:
        _skipped(workspace / "runs", e, "training and TensorBoard need a folder there: move it away")
    seed_notebooks(notebooks, workspace / "notebooks")
    config = os.environ.get(settings.VARIABLE)
    if config and Path(config).parent == workspace:
        try:
            settings.seed(Path(config))
        except (OSError, safefs.Skipped) as e:
            _skipped(Path(config), e, "move it away to get the default Ultralytics settings")


def prepare(ids: users.Ids, timeout: float = PREPARE_TIMEOUT, **kwargs: Path) -> bool:
    """prepare_as_user in a child process that is user yolo (ids) before it touches anything: root
    never acts inside the workspace. A child that does not finish in time is killed, so nothing a
    user leaves there can hold the services back. Returns whether it finished."""
    return asuser.run_as(
        ids,
        lambda: prepare_as_user(**kwargs),
        timeout,
        "preparing the workspace (runs/, notebooks/; see what is left in /workspace)",
    )
