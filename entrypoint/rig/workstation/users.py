"""The unprivileged user `yolo`: its uid/gid follow RIG_UID/RIG_GID so bind-mounted files belong to
the host user, and the helpers that run a program as that user."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rig import envnumbers, log, paths, safefs, userids
from rig.errors import RigError
from rig.userids import GID_ENV, UID_ENV
from rig.workstation import userenv

USER = "yolo"
HOME = paths.HOME
SHELL = "/bin/bash"
_NO_LIMIT = float("inf")

_logger = log.get("users")


@dataclass(frozen=True)
class Ids:
    uid: int
    gid: int


def _parse_id(number: envnumbers.Number, raw: str) -> int:
    if dataclasses.replace(number, low=0).parse(raw) == 0:
        raise RigError(
            f"{number.name}=0 would run SSH logins, Jupyter and training as root; set {number.name} to an "
            "unprivileged host id (`id -u` / `id -g` of your user), or leave it unset for 1000"
        )
    return number.read_int({number.name: raw})


def requested_ids(environ: Mapping[str, str], current: Ids) -> Ids:
    """The ids asked for by RIG_UID/RIG_GID; RIG_GID defaults to RIG_UID when only that is set."""
    raw_uid = environ.get(UID_ENV, "").strip()
    raw_gid = environ.get(GID_ENV, "").strip()
    uid = _parse_id(userids.UID, raw_uid) if raw_uid else current.uid
    gid = _parse_id(userids.GID, raw_gid) if raw_gid else (uid if raw_uid else current.gid)
    return Ids(uid, gid)


def current_ids(root: Path = Path("/")) -> Ids:
    """yolo's uid and gid as /etc/passwd has them."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] == USER:
            return Ids(int(fields[2]), int(fields[3]))
    raise RigError(f"user {USER!r} is missing from /etc/passwd; the image is broken, rebuild it")


def remap(target: Ids, root: Path = Path("/")) -> bool:
    """Give yolo the target ids (needs root). Returns whether anything changed."""
    current = current_ids(root)
    if current == target:
        return False
    # -o: the host's ids may already be taken inside the image (e.g. gid 100 `users`).
    if current.gid != target.gid:
        _run(["groupmod", "-o", "-g", str(target.gid), USER])
    if current.uid != target.uid:
        _run(["usermod", "-o", "-u", str(target.uid), USER])  # also chowns the home directory
    # The home directory is the `home` volume (or the container's layer), links yolo made included.
    safefs.reown_tree(
        root / HOME.relative_to("/"), (current.uid, current.gid), (target.uid, target.gid), _NO_LIMIT
    )
    _logger.info("user %s now has uid %d gid %d (%s)", USER, target.uid, target.gid, userids.BOTH)
    return True


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RigError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def service_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a service run as yolo: the container's, with yolo's identity."""
    env = dict(environ)
    env.update(HOME=str(HOME), USER=USER, LOGNAME=USER, SHELL=SHELL)
    return env


def session_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a program run as yolo: the container's, with yolo's identity and its own
    packages (`pip install` in a session) importable."""
    env = service_environ(environ)
    env.update(userenv.session_variables(environ, HOME))
    return env


def drop_privileges(ids: Ids) -> None:
    """Become yolo for good (this process and what it execs)."""
    os.setgroups([])
    os.setgid(ids.gid)
    os.setuid(ids.uid)
