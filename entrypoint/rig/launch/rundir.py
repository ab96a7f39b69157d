"""The run directory a launch trains in: one per job, the same on every node, found again on a restart.

Ultralytics names runs train, train-2, train-3... (its increment_path with sep "-"). A launch takes
the first free name by renaming a hidden folder that already holds its owner file (`.rig-owner`:
the job's identity, rig.launch.nodes.job_identity) onto it: the folder appears with its owner, at
once, so two launches never get one folder, and the nodes of one job, each running `rig train`,
end in the same one without talking: a node that finds its own job's folder takes it. A requeued job
finds its own again (resume=auto continues it); another job with the same name= gets the next. A
launch outside a scheduler has an owner of its own, so it always gets a new folder.

`scan` reads what is there, `choose` decides (pure), `claim` is the one step that writes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from rig.errors import RigError

OWNER_FILE = ".rig-owner"
MAX_OWNER_BYTES = 4096


@dataclass(frozen=True)
class Existing:
    path: Path
    owner: str | None  # None: no owner file (a folder of Ultralytics' own, an older rig's or a user's)


@dataclass(frozen=True)
class Choice:
    path: Path
    owned: bool  # the job's own folder, there already: nothing to claim


def candidates(project: Path, name: str) -> list[Path]:
    """name, name-2, name-3...: the names a run called `name` may have, up to the first free one."""
    out, n = [project / name], 2
    while out[-1].exists() or out[-1].is_symlink():
        out.append(project / f"{name}-{n}")
        n += 1
    return out


def read_owner(path: Path) -> str | None:
    """The owner file's identity; None without one (or one that is not a small regular file)."""
    try:
        fd = os.open(path / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, MAX_OWNER_BYTES).decode(errors="replace").strip()
    finally:
        os.close(fd)
    return text or None


def scan(project: Path, name: str) -> list[Existing]:
    """The run's existing folders in Ultralytics' order, with their owners."""
    return [Existing(p, read_owner(p)) for p in candidates(project, name)[:-1]]


def owns(existing: Existing, identity: str | None) -> bool:
    """Whether the job `identity` owns the folder: its owner file says so, or (a run of an older rig,
    which wrote none) it bears the job's default name, train-<job>."""
    if identity is None:
        return False
    return existing.owner == identity or (
        existing.owner is None and existing.path.name == f"train-{identity}"
    )


def choose(project: Path, name: str, existing: list[Existing], identity: str | None) -> Choice:
    """The job's own folder if it has one, else the first free name (to claim)."""
    own = next((e for e in existing if owns(e, identity)), None)
    if own is not None:
        return Choice(own.path, owned=True)
    return Choice(project / (name if not existing else f"{name}-{len(existing) + 1}"), owned=False)


def default_name(job: str | None) -> str:
    """train, or under a scheduler train-<job> (the same across the job's restarts: resume=auto)."""
    return f"train-{job}" if job else "train"


def launch_owner() -> str:
    """An owner no other launch has: for a launch outside any job."""
    return f"launch-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def _create(path: Path, owner: str) -> bool:
    """path made with its owner file inside, at once (rename of a hidden, complete folder); False
    when the name is taken."""
    tmp = path.parent / f".{path.name}.rig-{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        fd = os.open(tmp / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(owner + "\n")
        # rename(2) replaces an empty folder: never one that is there (a user's empty `train`).
        if path.exists() or path.is_symlink():
            return False
        try:
            tmp.rename(path)
        except OSError as e:
            if path.exists() or path.is_symlink():
                return False
            raise e
        return True
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def claim(project: Path, name: str, identity: str | None) -> Path:
    """The job's folder: its own if a node (or its run before a requeue) made it, else the first
    free name, made with the job's owner file (a launch outside any job: an owner of its own)."""
    owner = identity or launch_owner()
    path = project / name
    try:
        project.mkdir(parents=True, exist_ok=True)
        while True:
            choice = choose(project, name, scan(project, name), identity)
            path = choice.path
            # Taken meanwhile (a peer node of the job, another launch): the next scan sees it.
            if choice.owned or _create(path, owner):
                return path
    except OSError as e:
        raise RigError(
            f"cannot create the run directory {path} ({e.strerror or e}); give project= a writable folder"
        ) from None
