"""User yolo's own Python packages, and the environment of its sessions.

The image's /opt/venv is locked and read-only. `pip install NAME` in a session (SSH, a Jupyter
terminal, `%pip install` in a notebook) goes through rig's gate (rig.workstation.pipgate) into a
prefix in the home folder, `~/.local`, on the `home` volume: it survives `down`/`up`. Sessions
import from it through PYTHONPATH, which only user sessions get (the sshd SetEnv line, JupyterLab's
environment, the login profile for a non-root user): root's processes (`rig serve`, the
healthcheck, the seeding) never have it on their path. Every such variable is spelled here.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from rig import paths

VENV = Path("/opt/venv")
LOCK = VENV / "requirements.lock.txt"  # the image's pins, as `uv export` wrote them
PIP = paths.OPT / "pip"  # the image's pip (a folder holding the `pip` package), run only by the gate
GATE = paths.OPT / "python"  # a `pip` package that is the gate: `python -m pip` in a session
PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"
# RIG_PIP_UNPINNED=1 pip install ...: the user's say-so to shadow a pinned package in their prefix.
UNPINNED = "RIG_PIP_UNPINNED"
# Distributions that install a module the image has under another, pinned, name: each would shadow
# it as surely as another version of the pin would.
SAME_MODULE = {
    "ultralytics": "ultralytics-opencv-headless",  # and it brings the desktop opencv-python
    "opencv-python": "opencv-python-headless",
    "opencv-contrib-python": "opencv-python-headless",
    "opencv-contrib-python-headless": "opencv-python-headless",
}
# The desktop ones' headless twins: the desktop cv2 needs libGL, which the image leaves out, so a
# user who shadows the pin anyway wants these.
HEADLESS = {
    "ultralytics": "ultralytics-opencv-headless",
    "opencv-python": "opencv-python-headless",
    "opencv-contrib-python": "opencv-contrib-python-headless",
}
# The constraint that no release satisfies: pip refuses the name wherever it comes from (the command
# line, a wheel's file, a dependency), and says so in the conflict the gate turns into one line.
_NO_RELEASE = "===0+the.image.has.it.as."


def prefix(home: Path = paths.HOME) -> Path:
    return home / ".local"


def site_packages(home: Path = paths.HOME) -> Path:
    return prefix(home) / "lib" / PYTHON / "site-packages"


def scripts(home: Path = paths.HOME) -> Path:
    return prefix(home) / "bin"


def joined(first: str, existing: str | None, last: str = "") -> str:
    """first:existing:last without repeating an entry already there."""
    parts = [p for p in (existing or "").split(":") if p]
    ahead = [p for p in first.split(":") if p and p not in parts]
    behind = [p for p in last.split(":") if p and p not in parts]
    return ":".join(ahead + parts + behind)


def session_variables(environ: Mapping[str, str], home: Path = paths.HOME) -> dict[str, str]:
    """PATH and PYTHONPATH for a session of user yolo: its scripts after the image's, its packages
    and the pip gate importable. Only for user sessions, never for root."""
    return {
        "PATH": joined("", environ.get("PATH"), str(scripts(home))),
        "PYTHONPATH": joined(f"{GATE}:{site_packages(home)}", environ.get("PYTHONPATH")),
    }


def render_profile(image_path: str) -> str:
    """/etc/profile.d/rig-session.sh, baked into the image: every login shell (`docker run IMAGE
    bash -l`, `make shell`, SSH, Jupyter terminals) gets the venv back on PATH after Debian's
    /etc/profile reset it, and a non-root user its own packages. `rig serve` adds the container's
    whole environment in rig-env.sh, read just before this file."""
    return "\n".join(
        [
            "# Baked into the image by yolo-rig (rig.workstation.userenv). Debian's /etc/profile resets",
            "# PATH: the image's comes back. A non-root user also gets its own packages (`pip install`",
            "# puts them in ~/.local, on the `home` volume); root never imports them.",
            f'case ":$PATH:" in *":{VENV}/bin:"*) ;; *) PATH="{image_path}" ;; esac',
            'if [ "$(id -u)" != 0 ]; then',
            '  case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$PATH:$HOME/.local/bin" ;; esac',
            f'  _rig_site="$HOME/.local/lib/{PYTHON}/site-packages"',
            '  case ":${PYTHONPATH:-}:" in',
            f'    *":$_rig_site:"*) ;; *) PYTHONPATH="{GATE}:$_rig_site${{PYTHONPATH:+:$PYTHONPATH}}" ;;',
            "  esac",
            "  unset _rig_site",
            "  export PYTHONPATH",
            "fi",
            "export PATH",
            "",
        ]
    )


def constraints(lock_text: str) -> str:
    """The pins of a `uv export` requirements file as a pip constraints file: one `name==version
    [; marker]` per line, without the hashes (pip refuses hashes in constraints) and comments; and
    for each SAME_MODULE name whose twin is pinned, a constraint no release satisfies."""
    lines = []
    for raw in lock_text.splitlines():
        if not raw or raw[0].isspace() or raw.startswith(("#", "-")):
            continue
        lines.append(raw.removesuffix("\\").rstrip())
    pinned = _pins(lines)
    lines += [f"{name}{_NO_RELEASE}{twin}" for name, twin in SAME_MODULE.items() if twin in pinned]
    return "\n".join(lines) + "\n"


def refused_as(name: str, spec: str) -> str | None:
    """The pinned twin a constraint `name` + `spec` (as pip quotes it) stands for: SAME_MODULE's
    constraint names the pin it keeps; None for any other constraint."""
    if normalize(name) in SAME_MODULE and spec.startswith(_NO_RELEASE):
        return SAME_MODULE[normalize(name)]
    return None


def pinned_as(name: str, pins: Mapping[str, str]) -> tuple[str, str] | None:
    """The image's pin that `name` would shadow, as (pinned name, version): its own, or its
    SAME_MODULE twin's; None when the image pins neither."""
    for candidate in (normalize(name), SAME_MODULE.get(normalize(name))):
        if candidate is not None and candidate in pins:
            return candidate, pins[candidate]
    return None


def pins(lock_text: str) -> dict[str, str]:
    """name (normalized) -> version of every pin in the lock."""
    return _pins(constraints(lock_text).splitlines())


def _pins(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        requirement = line.split(";", 1)[0].strip()
        if "==" in requirement and "===" not in requirement:
            name, version = requirement.split("==", 1)
            found[normalize(name)] = version.strip()
    return found


def normalize(name: str) -> str:
    """PEP 503's normalized name: `Foo_Bar` and `foo-bar` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def added(site: Path) -> list[tuple[str, str]]:
    """The (name, version) of each distribution in the user's site-packages, from the names of their
    .dist-info folders alone: whoever lists them (root's `rig doctor` too) opens nothing in there."""
    try:
        entries = sorted(os.scandir(site), key=lambda e: e.name)
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.name.endswith(".dist-info") and "-" in entry.name:
            name, version = entry.name.removesuffix(".dist-info").rsplit("-", 1)
            found.append((name, version))
    return found
