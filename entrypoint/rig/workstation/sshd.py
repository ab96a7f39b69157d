"""OpenSSH for the workstation: authorized keys, the optional password, persistent host keys.

Keys are validated with `ssh-keygen -l` (the parser sshd itself uses) before anything listens,
so a pasted key with a missing character fails the start with the line that is wrong instead of
failing every login later.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rig import log, paths, safefs
from rig.errors import RigError

PORT = 2222
CONFIG = Path("/etc/ssh/sshd_config")
# Generated once into the state volume: the fingerprint survives `docker compose down` and `up`.
HOST_KEY_DIR = paths.STATE / "ssh"
# No RSA: generating one takes about a second of the first start, and every OpenSSH since 2014
# (6.5) speaks ed25519; ECDSA for the odd older client library.
HOST_KEY_TYPES = ("ed25519", "ecdsa")
# Rewritten on every start from SSH_PUBLIC_KEY and /run/secrets/authorized_keys, so removing a key
# there revokes it. Root-owned and outside the home directory: a login cannot add keys to it.
AUTHORIZED_KEYS_DIR = Path("/etc/ssh/authorized_keys")
MIN_PASSWORD_LENGTH = 8

_logger = log.get("sshd")


@dataclass(frozen=True)
class PublicKey:
    line: str
    source: str  # where it came from, for the error message: "SSH_PUBLIC_KEY line 2"


def parse_keys(text: str, source: str) -> list[PublicKey]:
    """The key lines of an authorized_keys text (blank lines and comments skipped)."""
    keys = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            keys.append(PublicKey(line, f"{source} line {number}"))
    return keys


def _shorten(line: str, width: int = 40) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def fingerprint(line: str) -> str:
    """`ssh-keygen -l` of one public key line: 'SHA256:... comment (TYPE)'; ValueError if malformed."""
    return _keygen_l(["-f", "-"], line + "\n")


def _keygen_l(args: list[str], stdin: str | None = None) -> str:
    result = subprocess.run(
        ["ssh-keygen", "-l", *args], input=stdin, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ValueError(result.stdout.strip() or result.stderr.strip())
    return result.stdout.strip().split(" ", 1)[1]


def validate_keys(keys: list[PublicKey]) -> None:
    for key in keys:
        try:
            fingerprint(key.line)
        except ValueError:
            raise RigError(
                f"{key.source} is not a valid SSH public key ({_shorten(key.line)!r}); paste the whole "
                "line of your ~/.ssh/id_ed25519.pub (type, base64 key, optional comment), one key per line"
            ) from None


def validate_password(password: str, source: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise RigError(
            f"{source} is shorter than {MIN_PASSWORD_LENGTH} characters; use a longer password, "
            "or leave it unset and log in with a key (SSH_PUBLIC_KEY)"
        )
    if "\n" in password or "\r" in password:
        raise RigError(f"{source} contains a line break; use a single-line password")


def command(password_login: bool, agent_forwarding: bool = False) -> list[str]:
    """sshd in the foreground, logging to stderr (the supervisor prefixes each line)."""
    argv = ["/usr/sbin/sshd", "-D", "-e", "-f", str(CONFIG)]
    if password_login:
        argv += ["-o", "PasswordAuthentication=yes"]
    if agent_forwarding:
        argv += ["-o", "AllowAgentForwarding=yes"]
    return argv


def ensure_host_keys(directory: Path = HOST_KEY_DIR) -> list[str]:
    """Create the missing host keys (once) and return their fingerprints."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    prints = []
    for kind in HOST_KEY_TYPES:
        key = directory / f"ssh_host_{kind}_key"
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "yolo-rig", "-f", str(key)],
                check=True,
                capture_output=True,
            )
            _logger.info("generated the %s host key in %s (kept across restarts)", kind, directory)
        os.chmod(key, 0o600)
        try:
            prints.append(_keygen_l(["-f", str(key)]))
        except ValueError as e:
            raise RigError(
                f"host key {key} is unreadable ({e}); delete it and restart to make a new one"
            ) from None
    return prints


def install_keys(keys: list[PublicKey], user: str, directory: Path = AUTHORIZED_KEYS_DIR) -> bool:
    """Write the keys; on a full disk remove the last start's (a key taken away stays away) and warn."""
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        safefs.write_file(directory / user, "".join(k.line + "\n" for k in keys).encode(), 0o644)
    except OSError as e:
        (directory / user).unlink(missing_ok=True)
        _logger.warning(
            "cannot write %s (%s): key logins are refused until there is space again; then restart",
            directory / user,
            e.strerror or e,
        )
        return False
    return True


def set_password(user: str, password: str | None) -> None:
    """Set the login password, or make sure none is left from an earlier start.

    '*' (rather than a locked '!') keeps key logins working: sshd refuses locked accounts.
    """
    if password is None:
        if _shadow_hash(user) != "*":  # already none: nothing to write (a full disk cannot stop this)
            subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
        return
    subprocess.run(["chpasswd"], input=f"{user}:{password}\n", text=True, check=True, capture_output=True)


def _shadow_hash(user: str, shadow: Path = Path("/etc/shadow")) -> str | None:
    for line in shadow.read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 1 and fields[0] == user:
            return fields[1]
    return None


def prepare_runtime_dir() -> None:
    # Debian's sshd refuses to start without its privilege separation directory.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
