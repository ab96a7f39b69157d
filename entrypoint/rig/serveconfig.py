"""`rig serve`'s input, read and checked before anything is written or listens.

Secrets come from NAME or from the file NAME_FILE names (compose/Kubernetes secrets); one of the
two, never both, so there is no doubt which one is in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rig import sshd
from rig.errors import RigError

SECRETS_DIR = Path("/run/secrets")


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


def secret(environ: Mapping[str, str], name: str) -> tuple[str | None, str]:
    """The value of NAME or of the file NAME_FILE (one trailing line break dropped), and its source."""
    value = environ.get(name, "")
    file_name = environ.get(f"{name}_FILE", "").strip()
    if value and file_name:
        raise RigError(f"both {name} and {name}_FILE are set; keep only one of them")
    if file_name:
        text = _read(Path(file_name), f"{name}_FILE={file_name}")
        value = text.removesuffix("\n").removesuffix("\r")
        return (value or None), f"{name}_FILE"
    return (value or None), name


def load(environ: Mapping[str, str], secrets_dir: Path = SECRETS_DIR) -> ServeConfig:
    keys = sshd.parse_keys(environ.get("SSH_PUBLIC_KEY", ""), "SSH_PUBLIC_KEY")
    keys_file = secrets_dir / "authorized_keys"
    if keys_file.exists() or keys_file.is_symlink():
        keys += sshd.parse_keys(_read(keys_file, "authorized keys"), str(keys_file))
    sshd.validate_keys(keys)
    password, source = secret(environ, "SSH_PASSWORD")
    if password is not None:
        sshd.validate_password(password, source)
    token, source = secret(environ, "JUPYTER_TOKEN")
    if token is not None and (len(token.strip()) != len(token) or any(c.isspace() for c in token)):
        raise RigError(
            f"{source} contains spaces or line breaks; use a single word, e.g. `openssl rand -hex 24`"
        )
    return ServeConfig(tuple(keys), password, token)
