"""Ultralytics' settings (`yolo settings`): the user's own file, seeded once from the image's defaults.

YOLO_CONFIG_DIR (the image sets /workspace/.config, in the `workspace` volume) holds Ultralytics/
settings.json and the fonts. The image bakes the defaults in /opt/rig/ultralytics/Ultralytics
(docker/ultralytics-settings.py: the volumes' paths, offline, TensorBoard on, font links); `seed`
copies what is missing into the user's folder and never overwrites: after that the file is the
user's, and `yolo settings KEY=VALUE` sticks across processes and `down`/`up`.

Seeding runs as the user (never as root), without following a link it finds there (rig.safefs).
Where the user's folder cannot be used (`docker run --user` with a uid that cannot write
/workspace), the process gets the baked defaults, read-only; `rig doctor` says so in one WARNING.
Root (RIG_USER=root) always gets the baked defaults: it never writes in a user's volume.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from rig import paths, safefs, userids

VARIABLE = "YOLO_CONFIG_DIR"
BAKED_CONFIG_DIR = paths.OPT / "ultralytics"  # YOLO_CONFIG_DIR of the baked defaults
SUBDIR = "Ultralytics"  # what Ultralytics appends to YOLO_CONFIG_DIR
FILE = "settings.json"
MAX_SETTINGS_BYTES = 1 << 20


def settings_file(environ: Mapping[str, str]) -> Path:
    """The settings.json Ultralytics reads under this environment (its get_user_config_dir on Linux;
    the image always sets YOLO_CONFIG_DIR)."""
    config = environ.get(VARIABLE)
    return (Path(config).expanduser() if config else Path.home() / ".config") / SUBDIR / FILE


def _is_baked(config_dir: Path) -> bool:
    return os.path.normpath(config_dir) == os.path.normpath(BAKED_CONFIG_DIR)


def seed(config_dir: Path, baked: Path | None = None) -> list[str]:
    """Copy the baked settings.json and font links (baked: the image's Ultralytics/ folder) into
    config_dir/Ultralytics where they are missing; returns the names copied. OSError or
    safefs.Skipped when the folder cannot be used. config_dir's parent must exist (the workspace)."""
    baked = baked or BAKED_CONFIG_DIR / SUBDIR
    copied: list[str] = []
    with safefs.opened_dir(config_dir.parent) as parent_fd:
        config_fd = safefs.ensure_dir(config_dir.name, parent_fd)
        try:
            sub_fd = safefs.ensure_dir(SUBDIR, config_fd)
            try:
                for entry in sorted(baked.iterdir()):
                    if safefs.describe(entry.name, sub_fd) != "nothing":
                        continue  # the user's, whatever it is
                    if entry.is_symlink():  # a font: the same link to Debian's font
                        os.symlink(os.readlink(entry), entry.name, dir_fd=sub_fd)
                    elif entry.is_file():
                        safefs.write_atomic(entry.name, entry.read_bytes(), sub_fd, mode=0o644)
                    else:
                        continue
                    copied.append(entry.name)
            finally:
                os.close(sub_fd)
        finally:
            os.close(config_fd)
    return copied


def prepared_environ(environ: Mapping[str, str], *, root: bool) -> dict[str, str]:
    """The environment for a command: its settings folder seeded, or the baked defaults where it
    cannot be (root; a folder this user cannot write). Call it as the user who runs the command."""
    env = dict(environ)
    config = env.get(VARIABLE)
    if not config or _is_baked(Path(config)):
        return env
    if root:
        env[VARIABLE] = str(BAKED_CONFIG_DIR)
        return env
    try:
        seed(Path(config))
    except (OSError, safefs.Skipped):
        env[VARIABLE] = str(BAKED_CONFIG_DIR)
    return env


def problem(environ: Mapping[str, str], root: Path = Path("/")) -> str | None:
    """Why `yolo settings` changes would not stick for this process, or None when they will.
    root: where the file system is (tests give a fake tree)."""
    shown = settings_file(environ)
    file = root / shown.relative_to(shown.anchor)
    folder = file.parent
    if file.is_symlink():
        return f"{shown} is a link; Ultralytics would write through it"
    if file.exists():
        if os.access(file, os.W_OK) and os.access(folder, os.W_OK | os.X_OK):
            return None
    elif folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
        return None
    return f"{shown} is not writable by uid {os.geteuid()}: `yolo settings` changes do not stick"


FIX = (
    f"run as user yolo (no `docker run --user`; {userids.BOTH} give yolo your ids), make the file "
    "yours (`ls -l` it), or set YOLO_CONFIG_DIR to a folder you own"
)


def fallback(config_dir: Path, runs_dir: str) -> None:
    """Settings of the user's own where the image's folder is read-only (rig.places): the baked
    settings and fonts seeded into config_dir (in the user's private folder), their runs_dir set to
    runs_dir (`runs`: where Ultralytics runs); every other key stays as the user left it. OSError or
    safefs.Skipped when the folder cannot be used."""
    seed(config_dir)
    with safefs.opened_dir(config_dir / SUBDIR) as fd:
        text = safefs.read_regular(FILE, fd, MAX_SETTINGS_BYTES)
        try:
            values = json.loads(text) if text else {}
        except ValueError:
            raise safefs.Skipped(f"{FILE} is not JSON; remove it to start from the image's") from None
        if values.get("runs_dir") != runs_dir:
            values["runs_dir"] = runs_dir
            safefs.write_atomic(FILE, json.dumps(values, indent=2).encode(), fd, mode=0o644)
