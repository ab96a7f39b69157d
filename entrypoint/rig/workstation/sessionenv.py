"""The container's environment for SSH logins, `ssh host cmd` and Jupyter terminals.

sshd starts every session with a clean environment, and Debian's /etc/profile resets PATH, so
without this a login would not find the venv's `python` nor see the GPU variables. `rig serve`
writes the resolved environment once at start, twice:
- as one sshd `SetEnv` line (quoted for sshd's parser) that sshd applies to every session,
  including `ssh host cmd` (Debian's bash ignores $BASH_ENV when sshd starts it);
- as quoted shell exports in /etc/profile.d/, which login shells (SSH, Jupyter terminals:
  `bash -l`) read after /etc/profile has reset PATH.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from rig import log, safefs
from rig.workstation import userenv
from rig.workstation.serveconfig import SECRET_VARIABLES as SECRETS

_logger = log.get("serve")

PROFILE = Path("/etc/profile.d/rig-env.sh")
SSHD_INCLUDE = Path("/etc/ssh/sshd_config.d/rig-env.conf")

# Per-session values sshd, login or the shell set themselves; exporting ours would be wrong.
PER_SESSION = frozenset(
    {
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "TERM",
        "MAIL",
        "HOSTNAME",
        "_",
        "BASH_ENV",
    }
)
# SSH_CLIENT, SSH_CONNECTION, SSH_TTY... belong to the session; SSH_PUBLIC_KEY & co. are rig's input.
PER_SESSION_PREFIXES = ("SSH_",)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def session_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a session should see, in a stable order."""
    return {
        name: environ[name]
        for name in sorted(environ)
        if _NAME.fullmatch(name)
        and name not in SECRETS
        and name not in PER_SESSION
        and not name.startswith(PER_SESSION_PREFIXES)
    }


def render_profile(environ: Mapping[str, str]) -> str:
    lines = [
        "# Written by `rig serve` at start: the container's environment for login shells.",
        "# Edits are lost on restart; set variables on the container (compose.yaml `environment:`).",
    ]
    lines += [f"export {name}={shlex.quote(value)}" for name, value in session_variables(environ).items()]
    lines += ["unset " + " ".join(sorted(SECRETS)), ""]
    return "\n".join(lines)


def _sshd_quote(name: str, value: str) -> str:
    # sshd's argv_split: inside double quotes, backslash escapes only backslash and quotes.
    escaped = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def render_sshd(environ: Mapping[str, str]) -> str:
    """One SetEnv line: sshd ignores every SetEnv after the first. Config lines cannot hold a
    line break, so multi-line values reach login shells only (through the profile)."""
    variables = {**session_variables(environ), **userenv.session_variables(environ)}  # yolo's only
    pairs = [_sshd_quote(n, v) for n, v in variables.items() if "\n" not in v and "\r" not in v]
    return "# Written by `rig serve` at start: the container's environment for SSH sessions.\n" + (
        f"SetEnv {' '.join(pairs)}\n" if pairs else ""
    )


def write(environ: Mapping[str, str], profile: Path = PROFILE, sshd_include: Path = SSHD_INCLUDE) -> bool:
    """Both files; on a full disk the last start's stay, with one WARNING (the box still starts)."""
    try:
        safefs.write_file(profile, render_profile(environ).encode())
        safefs.write_file(sshd_include, render_sshd(environ).encode())
    except OSError as e:
        _logger.warning(
            "cannot write the sessions' environment (%s): logins keep the last start's", e.strerror or e
        )
        return False
    return True
