"""`rig serve`'s input, read and checked before anything is written or listens.

Secrets come from NAME or from the file NAME_FILE names (compose/Kubernetes secrets); one of the
two, never both, so there is no doubt which one is in force.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rig import log
from rig.errors import RigError
from rig.userids import UID_ENV
from rig.workstation import sshd, users

SECRETS_DIR = Path("/run/secrets")
# rig's secrets and the files that hold them: read by `rig serve`, handed to their one consumer
# (sshd's password database, JupyterLab's config file), and removed from every other environment:
# commands run in the container, sessions, kernels, terminals.
SECRET_VARIABLES = frozenset({"SSH_PASSWORD", "SSH_PASSWORD_FILE", "JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE"})
MIN_TOKEN_LENGTH = 16

_logger = log.get("serve")


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in SECRET_VARIABLES}


@dataclass(frozen=True)
class ServeConfig:
    keys: tuple[sshd.PublicKey, ...]
    password: str | None  # None: key-only SSH
    jupyter_token: str | None  # None: generated once and kept in the state volume


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise RigError(
            f"{what}: cannot read {path} ({reason}); mount the file read-only into the container "
            "and make it readable by root"
        ) from None


def readable_by(st: os.stat_result, ids: users.Ids) -> bool:
    """Whether a file with this stat can be read by a process with these ids (no extra groups)."""
    if st.st_uid == ids.uid:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid == ids.gid:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


def _warn_if_exposed(path: Path, what: str, ids: users.Ids | None) -> None:
    if ids is None:
        return
    try:
        st = path.stat()
    except OSError:
        return
    if readable_by(st, ids):
        _logger.warning(
            "%s: %s is readable by user %s (mode %o, owner %d:%d), so every login can read the secret; "
            f"on the host, `chmod 600` the file and make it owned by another user than {UID_ENV} (e.g. root)",
            what,
            path,
            users.USER,
            stat.S_IMODE(st.st_mode),
            st.st_uid,
            st.st_gid,
        )


def secret(environ: Mapping[str, str], name: str, ids: users.Ids | None = None) -> tuple[str | None, str]:
    """The value of NAME or of the file NAME_FILE (one trailing line break dropped), and its source.
    ids: user yolo's, to warn when the file is readable by it."""
    value = environ.get(name, "")
    file_name = environ.get(f"{name}_FILE", "").strip()
    if value and file_name:
        raise RigError(f"both {name} and {name}_FILE are set; keep only one of them")
    if file_name:
        text = _read(Path(file_name), f"{name}_FILE={file_name}")
        _warn_if_exposed(Path(file_name), f"{name}_FILE", ids)
        value = text.removesuffix("\n").removesuffix("\r")
        return (value or None), f"{name}_FILE"
    return (value or None), name


def load(
    environ: Mapping[str, str], secrets_dir: Path = SECRETS_DIR, ids: users.Ids | None = None
) -> ServeConfig:
    keys = sshd.parse_keys(environ.get("SSH_PUBLIC_KEY", ""), "SSH_PUBLIC_KEY")
    keys_file = secrets_dir / "authorized_keys"
    if keys_file.exists() or keys_file.is_symlink():
        keys += sshd.parse_keys(_read(keys_file, "authorized keys"), str(keys_file))
    sshd.validate_keys(keys)
    password, source = secret(environ, "SSH_PASSWORD", ids)
    if password is not None:
        sshd.validate_password(password, source)
    token, source = secret(environ, "JUPYTER_TOKEN", ids)
    if token is not None and any(c.isspace() for c in token):
        raise RigError(
            f"{source} contains spaces or line breaks; use a single word, e.g. `openssl rand -hex 24`"
        )
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise RigError(
            f"{source} is shorter than {MIN_TOKEN_LENGTH} characters, short enough to guess; use a longer "
            "one (e.g. `openssl rand -hex 24`), or leave it unset to have one generated"
        )
    return ServeConfig(tuple(keys), password, token)
