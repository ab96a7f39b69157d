"""The checkpoint a resume loads: opened once, through folders that were checked, and handed to the
ranks as a private copy of what was opened, never by its path again.

Ultralytics unpickles a resumed checkpoint (`weights_only=False`) by path, in every rank, several
times, seconds after the launcher looked at it. A folder above it that another user may rename in
(a team share RIG_SHARE_GROUP trusts, say) would let them put their own pickle at that path in the
meantime. So the launcher opens the checkpoint once (`open_checked`: from `/`, no link followed,
each step passing rig.safefs's trust rule), reads what planning needs from that descriptor
(rig.launch.autoresume), and copies the same descriptor's bytes into a folder of its own (`copy`:
0700, the user's, in the job's temporary folder if it passes the rule, else the container's /tmp). The
ranks get the copy's path in `model=` (and `resume=`); Ultralytics keeps the run in its folder,
which the checkpoint names (its `save_dir`), whatever the file is called. The copy is removed once
the launch (torchrun, or the one trainer it became) has ended (`remove_after`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rig import log, places, safefs
from rig.errors import RigError

_logger = log.get("launch")
PREFIX = "rig-resume-"
# The checkpoint as the user named it, for the ranks' lines: they load the copy (rig.launch.trainer).
NAMED_ENV = "RIG_RESUMED_FROM"
_CHUNK = 8 << 20
# The remover: its stdin ends when the launch has; the stop signals sent to the job's processes are
# not its own (rm never follows a link inside the folder).
_REMOVE_AT_EOF = 'trap "" HUP INT TERM; cat >/dev/null; exec rm -rf -- "$1"'
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, eq=False)
class Checked:
    """A checkpoint opened once, every step of its path checked: the descriptor is what is loaded."""

    path: Path  # as the request named it
    fd: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True)
class Copy:
    folder: Path  # the private folder, removed at the end
    file: Path  # what the ranks load


def named(environ: Mapping[str, str], loaded: str) -> str:
    """The checkpoint a rank loads (`loaded`, the private copy) as the user named it, for its lines;
    any other path as it is."""
    named = environ.get(NAMED_ENV, "")
    return named if named and Path(loaded).parent.name.startswith(PREFIX) else loaded


def open_checked(path: Path, who: safefs.Trust | None = None) -> Checked:
    """The checkpoint at path, opened from `/` (rig.safefs.open_trusted); one line when a step does
    not pass or it is missing."""
    try:
        return Checked(path, safefs.open_trusted(path, who or safefs.trust()))
    except safefs.Untrusted as e:
        raise RigError(
            f"{e}: rig resumes only a checkpoint of your own that no one else can write, in folders no "
            "one else can write; copy it into a folder of yours (chmod go-w) and resume that"
        ) from None
    except FileNotFoundError:
        raise RigError(f"{path}: no such checkpoint; give the path of a last.pt to resume") from None
    except OSError as e:
        raise RigError(f"{path} cannot be read ({e.strerror or e})") from None


def _open_root(root: Path | None, who: safefs.Trust) -> tuple[Path, int]:
    """Where private copies go (the job's temporary folder, else /tmp: rig.places.tmp_root), opened
    when it passes the trust rule for the user alone (root's and sticky, or the user's own); else
    one line."""
    root = root or places.tmp_root(os.environ)
    try:
        return root, safefs.open_trusted(root, safefs.Trust(who.uid), folder=True)
    except (safefs.Untrusted, OSError) as e:
        raise RigError(
            f"cannot keep a private copy of the checkpoint in {root} ({e}); set TMPDIR to a folder of "
            "yours that no one else can write"
        ) from None


def copy(checked: Checked, root: Path | None = None, who: safefs.Trust | None = None) -> Copy:
    """The checked checkpoint's bytes (from its descriptor) in a new 0700 folder of the user's under
    root (the temporary folder by default), the file named as the checkpoint is (Ultralytics tells a
    checkpoint by its .pt). One line when it cannot be made (a full disk); nothing left behind."""
    who = who or safefs.trust()
    root, root_fd = _open_root(root, who)
    folder = root / f"{PREFIX}{secrets.token_hex(8)}"
    made = False
    try:
        os.mkdir(folder.name, 0o700, dir_fd=root_fd)  # a new name: never one that was there
        made = True
        fd = os.open(folder.name, _DIR_FLAGS, dir_fd=root_fd)
        try:
            os.fchmod(fd, 0o700)
            out = os.open(
                checked.path.name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=fd,
            )
            try:
                _copy_bytes(checked.fd, out)
            finally:
                os.close(out)
        finally:
            os.close(fd)
    except OSError as e:
        if made:
            _remove(root_fd, folder.name)
        raise RigError(
            f"cannot copy {checked.path} for the ranks into {root} ({e.strerror or e}); free space there, "
            "or set TMPDIR to a folder of yours with room"
        ) from None
    finally:
        os.close(root_fd)
    return Copy(folder, folder / checked.path.name)


def _remove(root_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
        try:
            for entry in os.listdir(fd):
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=root_fd)


def _copy_bytes(src: int, dst: int) -> None:
    """Every byte of src from its start, whatever its offset (a reader may have moved it)."""
    offset = 0
    while True:
        try:
            n = os.copy_file_range(src, dst, _CHUNK, offset)
        except OSError:  # EXDEV on older kernels, EINVAL on some file systems: plain reads
            n = -1
        if n == -1:
            while chunk := os.pread(src, _CHUNK, offset):
                os.write(dst, chunk)
                offset += len(chunk)
            return
        if n == 0:
            return
        offset += n


def remove_after(folder: Path) -> None:
    """Remove folder once this process, after its exec, and everything that inherited the pipe have
    ended: a child in a session of its own waits for the end of a pipe whose write end this process
    keeps across exec (torchrun's ranks, started with close_fds, never hold it). It ignores the stop
    signals a terminal or a scheduler sends the job, so the ranks' own stop still removes it."""
    read_end, write_end = os.pipe()
    try:
        subprocess.Popen(
            ["/bin/sh", "-c", _REMOVE_AT_EOF, "rig-cleanup", folder],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    os.set_inheritable(write_end, True)


# ---------------------------------------------------------------------------------------------
# Stock `yolo train` resuming, started through `rig yolo`: the same, on its arguments.


def merged(argv: Sequence[str]) -> list[str]:
    """Ultralytics' CLI reads `key = value`, `key= value` and `key =value` as key=value."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "=" and out and i + 1 < len(argv):
            out[-1] = f"{out[-1]}={argv[i + 1]}"
            i += 2
        elif a.endswith("=") and a != "=" and i + 1 < len(argv) and "=" not in argv[i + 1]:
            out.append(a + argv[i + 1])
            i += 2
        elif a.startswith("=") and a != "=" and out:
            out[-1] += a
            i += 1
        else:
            out.append(a)
            i += 1
    return out


def yolo_resumed(argv: Sequence[str]) -> tuple[str, int] | None:
    """The checkpoint `yolo train` would resume, as (its path as given, the argument naming it): that of
    resume=PATH, or model=X.pt with resume (resume=True); None when it resumes nothing."""
    args = [a[2:] if a.startswith("--") else a for a in merged(argv)]
    found: dict[str, tuple[str, int]] = {}
    train = False
    for i, a in enumerate(args):
        key, eq, value = a.partition("=")
        if eq:
            found[key] = (value, i)
            train = train or (key == "mode" and value == "train")
        elif a == "resume":
            found["resume"] = ("True", i)
        train = train or a == "train"
    resume, i = found.get("resume", ("", -1))
    if not train or resume.strip().lower() in {"", "false", "none", "0"}:
        return None
    if resume.strip().lower() != "true":
        return resume, i
    model, i = found.get("model", ("", -1))
    return (model, i) if model.endswith(".pt") else None


def for_yolo(
    argv: Sequence[str], weights_dir: Path, who: safefs.Trust | None = None
) -> tuple[list[str], Copy | None]:
    """Stock `yolo train` resuming: its checkpoint (as Ultralytics finds it: the path, else a bare name
    in the weights folder) opened and checked, copied; the arguments with the copy in its place.
    Anything else: the arguments unchanged, merged as Ultralytics reads them."""
    args = merged(argv)
    resumed = yolo_resumed(args)
    if resumed is None:
        return args, None
    given, i = resumed
    path = Path(given)
    if not path.exists() and not path.is_absolute() and len(path.parts) == 1:
        path = weights_dir / path
    checked = open_checked(path, who)
    try:
        made = copy(checked, who=who)
    finally:
        checked.close()
    key = args[i].lstrip("-").partition("=")[0]
    args[i] = f"{key}={made.file}"
    _logger.info("resuming %s: `yolo` loads a private copy of it, %s", path, made.file)
    return args, made
