"""File actions on paths a user can write, done without ever following a link.

`rig` starts as root and prepares volumes (`/workspace`, `/datasets`, `/weights`) whose contents
user `yolo` controls, also while another container (a `make train` job) runs on the same volume.
Every action here therefore works on descriptors: directories are opened with `O_NOFOLLOW`, names
are resolved relative to an open directory (`dir_fd`), a file is read only when `fstat` on the
open descriptor says it is a regular file of bounded size, and modes and owners are changed on
the descriptor or with `AT_SYMLINK_NOFOLLOW`. A link, FIFO, device or oversized file where a file
is expected becomes a `Skipped` with the reason, which callers log once and step over.

A user's own inputs (a data yaml, an image, a token file) are read with `open_input`/`read_input`:
links are followed, as the user meant them, but only a regular file is read, so a FIFO or a device
never blocks the reader and a huge file is refused before it is read.

What a job on shared storage may trust (its run folders, checkpoints, owner files, cache files) is
one rule, `distrust`, as OpenSSH's `safe_path` and sudo put it: the entry and every folder above it
belong to the user or root, and none can be written by another user, unless it is a folder with the
sticky bit owned by root or the user (others may add entries there, never rename or remove one they
do not own), or the writer is the group the user named in RIG_SHARE_GROUP. `open_trusted` applies it
from `/` down, one descriptor at a time, never following a link: what it returns is what it checked.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rig.errors import RigError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
Ids = tuple[int, int]


class Skipped(Exception):
    """A path that is not what it should be (a link, a FIFO, a file for a folder, too large)."""


def kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a file"


def owner_name(uid: int) -> str:
    """uid 2002 (bob): a file's owner as a line names it."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


SHARE_GROUP_ENV = "RIG_SHARE_GROUP"  # the one group a user trusts beside them: it reads, and may write
MAX_GID = 2**32 - 2  # 4294967295 is (gid_t)-1: "leave the group as it is" to chown


def group_name(gid: int) -> str:
    """gid 3000 (team): a group as a line names it."""
    try:
        return f"gid {gid} ({grp.getgrgid(gid).gr_name})"
    except KeyError:
        return f"gid {gid}"


def share_gid(environ: Mapping[str, str]) -> int | None:
    """RIG_SHARE_GROUP's group id: a group name, or the id of a group this system has, that the user
    is in; None (unset): run folders stay private. Anything else is one line."""
    raw = environ.get(SHARE_GROUP_ENV, "").strip()
    if not raw:
        return None
    given = f"{SHARE_GROUP_ENV}={raw!r}"
    how = "give a group name or the id of an existing group (getent group), or unset it"
    if raw.isascii() and raw.isdigit():
        gid = int(raw)
        if gid > MAX_GID:
            raise RigError(f"{given} is not a group id (0 to {MAX_GID}); {how}")
        try:
            grp.getgrgid(gid)
        except KeyError:
            raise RigError(f"{given}: no group has id {gid} on this system; {how}") from None
    else:
        try:
            gid = grp.getgrnam(raw).gr_gid
        except (KeyError, ValueError):
            raise RigError(f"{given} is not a group of this system; {how}") from None
    if os.geteuid() != 0 and gid not in {os.getegid(), *os.getgroups()}:
        raise RigError(f"{given}: you are not in {group_name(gid)}; ask to be added to it, or unset it")
    return gid


@dataclass(frozen=True)
class Trust:
    """Whom a job trusts beside root: its user, and RIG_SHARE_GROUP's group as a writer (None: none)."""

    uid: int
    group: int | None = None


def trust(environ: Mapping[str, str] | None = None, uid: int | None = None) -> Trust:
    """The running user's trust (RIG_SHARE_GROUP from environ, os.environ by default)."""
    return Trust(os.geteuid() if uid is None else uid, share_gid(os.environ if environ is None else environ))


def distrust(st: os.stat_result, who: Trust, *, folder: bool) -> str | None:
    """Why an entry (its lstat or fstat) is not one `who` may trust; None when it is. The one rule
    (the module's doc): the kind wanted, owned by the user or root, and writable by no one else,
    unless a sticky folder of the user's or root's, or the writer is RIG_SHARE_GROUP's group."""
    want = stat.S_ISDIR if folder else stat.S_ISREG
    if not want(st.st_mode):
        return f"is {kind(st.st_mode)}, not {'a folder' if folder else 'a regular file'}"
    if st.st_uid not in {who.uid, 0}:
        return f"belongs to {owner_name(st.st_uid)}, not to you ({owner_name(who.uid)}) or root"
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o022 or (folder and mode & stat.S_ISVTX):
        return None  # sticky: others may add their own entries, never rename or remove another's
    if mode & 0o002:
        return f"can be written by anyone (mode {mode:04o}); chmod o-w it"
    if st.st_gid != who.group:
        share = "" if who.group is not None else f", or set {SHARE_GROUP_ENV} to that group if you trust it"
        return f"can be written by {group_name(st.st_gid)} (mode {mode:04o}); chmod g-w it{share}"
    return None


class Untrusted(Exception):
    """A step of a path that distrust refuses (or a link, or one that cannot be opened): where, why."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem


def open_trusted(
    path: str | Path, who: Trust, *, folder: bool = False, create_mode: int | None = None
) -> int:
    """A descriptor of path (a regular file, or a folder), opened from `/` one step at a time with
    O_NOFOLLOW, each step fstat-checked by distrust on the descriptor it came from: what is returned
    is what was checked, whoever renames what meanwhile. A mount point on the way pins what is below
    it (rename(2) and rmdir(2) of a mount point fail with EBUSY), so the folders above one do not
    decide what is below it: the container's /workspace above a runs volume, whoever owns it. A
    relative path is taken from the working folder; `..` is resolved by name. Untrusted for a step
    that does not pass (a link included); FileNotFoundError once a missing step is reached, every
    step above it passing. create_mode: the missing folders are made (mode & ~umask, never writable
    by others), each in its checked parent."""
    full = Path(os.path.normpath(os.path.join(os.getcwd(), path)))
    here = Path("/")
    fd = os.open("/", _DIR_FLAGS)
    try:
        mount = _mount_id(fd)
        refused = _refusal(fd, here, who, folder=True)
        names = full.parts[1:]
        for i, name in enumerate(names):
            here = here / name
            leaf = i == len(names) - 1 and not folder
            try:
                step = os.open(name, _READ_FLAGS if leaf else _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if refused is not None:
                    raise refused from None  # nothing is made, or looked for, under such a folder
                if create_mode is None or leaf:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, create_mode & ~0o022, dir_fd=fd)
                step = _step(name, fd, here, leaf)
            except OSError as e:
                raise _unopenable(name, fd, here, leaf, e) from None
            os.close(fd)
            fd = step
            if (below := _mount_id(fd)) is not None and mount is not None and below != mount:
                refused = None  # a mount point: nothing above it can rename or remove it
            mount = below
            refused = refused or _refusal(fd, here, who, folder=not leaf)
        if refused is not None:
            raise refused
        if not folder:
            os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _mount_id(fd: int) -> int | None:
    """The mount an open descriptor is on (/proc's fdinfo); None where /proc does not say."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _refusal(fd: int, here: Path, who: Trust, *, folder: bool) -> Untrusted | None:
    problem = distrust(os.fstat(fd), who, folder=folder)
    return Untrusted(here, problem) if problem else None


def _step(name: str, dir_fd: int, here: Path, leaf: bool) -> int:
    try:
        return os.open(name, _READ_FLAGS if leaf else _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _unopenable(name, dir_fd, here, leaf, e) from None


def _unopenable(name: str, dir_fd: int, here: Path, leaf: bool, e: OSError) -> Untrusted:
    what = describe(name, dir_fd)
    if what == ("a folder" if not leaf else "a file") or what == "nothing":
        return Untrusted(here, f"cannot be opened ({e.strerror or e})")  # EACCES: a folder you cannot enter
    return Untrusted(here, f"is {what}, not {'a regular file' if leaf else 'a folder'}")


def not_regular(path: str | Path) -> str | None:
    """What path is when it is not a regular file ('a FIFO', 'a folder', 'nothing'), links followed;
    None for a regular file. A stat only: it never blocks on what it finds."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "nothing"
    except OSError as e:  # a loop of links, a name too long, no permission on a folder
        return f"unreadable ({e.strerror or e})"
    return None if stat.S_ISREG(mode) else kind(mode)


def open_input(path: str | Path) -> int:
    """A blocking descriptor of the regular file at path (links followed); Skipped for anything else,
    found on the open descriptor before any read can wait (O_NONBLOCK: a FIFO opens at once)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:  # ENXIO: a socket; ELOOP; EACCES
        raise Skipped(f"it cannot be opened ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Skipped(f"it is {kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_input(path: str | Path, max_bytes: int) -> bytes:
    """The content of the regular file at path (links followed); Skipped for anything else or for a
    file over max_bytes, which is refused before a byte of it is read."""
    fd = open_input(path)
    try:
        return _read_bounded(fd, max_bytes)
    finally:
        os.close(fd)


def _too_large(max_bytes: int, size: int | None = None) -> Skipped:
    limit = f"{max_bytes // (1 << 20)} MiB" if max_bytes >= 1 << 20 else f"{max_bytes} bytes"
    return Skipped(f"it is larger than {limit}" + (f" ({size} bytes)" if size is not None else ""))


def _read_bounded(fd: int, max_bytes: int) -> bytes:
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise _too_large(max_bytes, size)
    chunks = []
    total = 0
    while chunk := os.read(fd, _CHUNK):
        total += len(chunk)
        if total > max_bytes:  # it grew while being read
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def describe(name: str, dir_fd: int) -> str:
    """What is at name, without following it: 'a symbolic link', 'a FIFO', ..."""
    try:
        return kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return "nothing"


def open_dir(path: str | Path, dir_fd: int | None = None) -> int:
    """An open directory descriptor; Skipped when path is a link or not a directory."""
    try:
        return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except (NotADirectoryError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        what = describe(str(path), dir_fd) if dir_fd is not None else "not a folder"
        raise Skipped(f"it is {what}, not a folder") from None


@contextlib.contextmanager
def opened_dir(path: str | Path, dir_fd: int | None = None) -> Iterator[int]:
    fd = open_dir(path, dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def ensure_dir(name: str, dir_fd: int, mode: int = 0o755) -> int:
    """Open the subdirectory name of dir_fd, creating it if missing; Skipped if something else is there."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=dir_fd)
    return open_dir(name, dir_fd)


def read_regular(name: str, dir_fd: int, max_bytes: int) -> bytes | None:
    """The content of the regular file name; None if there is nothing; Skipped for anything else."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError:  # ELOOP: a link; EISDIR; ENXIO: a socket
        raise Skipped(f"it is {describe(name, dir_fd)}, not a regular file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Skipped(f"it is {kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return _read_bounded(fd, max_bytes)
    finally:
        os.close(fd)


def write_atomic(
    name: str,
    data: bytes | Callable[[BinaryIO], object],
    dir_fd: int,
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
) -> None:
    """Write name in dir_fd through a new temporary file renamed over it: a link planted at name is
    replaced, never followed, and a crash leaves the old content or the new one. Mode and owner are
    set on the open descriptor, so nobody can swap the file in between. A directory at name: Skipped.
    data: the bytes, or a function that writes them to the open file (a large checkpoint, streamed).
    """
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
    )
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                data(f)
            f.flush()
            os.fsync(fd)
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, *owner)
        os.close(fd)
        fd = -1
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError:
            raise Skipped("it is a folder, not a regular file") from None
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)  # the rename itself survives a power loss
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file(
    path: Path,
    data: bytes | Callable[[BinaryIO], object],
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
) -> None:
    """write_atomic for a path whose folder is trusted (root's own, e.g. /run/rig); created if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with opened_dir(path.parent) as dfd:
        write_atomic(path.name, data, dfd, mode, owner)


@dataclass
class ReownResult:
    changed: int = 0
    complete: bool = True
    left: int = 0  # entries found still owned by the old ids once the deadline passed
    counted: bool = True  # False: counting `left` ran out of time too ("at least left")


def reown_tree(
    root: Path,
    old: tuple[int, int],
    new: tuple[int, int],
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
    count_deadline: float | None = None,
) -> ReownResult:
    """Give new uid (gid) whatever under root has the old uid (gid). Links are re-owned themselves
    (never their targets) and never descended into; other file systems mounted below root are left
    alone. The walk is a loop over a stack of open folders (no recursion: any depth), and the clock
    is read at every entry (a folder of a million files is no exception). After `deadline` (a
    monotonic time) it only counts what is left, until `count_deadline`, with complete=False.
    """
    result = ReownResult()
    try:
        root_fd = open_dir(root)
    except (FileNotFoundError, Skipped):
        return result
    device = os.fstat(root_fd).st_dev
    # Each level: an open folder and the names of its subfolders still to enter.
    stack: list[tuple[int, Iterator[str]]] = []
    try:
        _visit(".", root_fd, old, new, result, clock() <= deadline)
        stack.append((root_fd, iter(_subfolders(root_fd, old, new, result, device, clock, deadline))))
        while stack:
            fd, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if fd != root_fd:
                    os.close(fd)
                continue
            if count_deadline is not None and clock() > count_deadline:
                result.counted = False
                break
            try:
                # O_NOFOLLOW: a folder swapped for a link since it was listed is not entered.
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            stack.append((child, iter(_subfolders(child, old, new, result, device, clock, deadline))))
    finally:
        for fd, _ in stack:
            if fd != root_fd:
                os.close(fd)
        os.close(root_fd)
    result.complete = result.left == 0 and result.counted
    return result


def _subfolders(
    dir_fd: int,
    old: tuple[int, int],
    new: tuple[int, int],
    result: ReownResult,
    device: int,
    clock: Callable[[], float],
    deadline: float,
) -> list[str]:
    """Re-own (or, past the deadline, count) every entry of one folder; its subfolders to enter."""
    folders: list[str] = []
    try:
        entries = os.scandir(dir_fd)
    except OSError:
        return folders
    with entries:
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev != device:
                    continue  # a mount of its own below the volume
                folders.append(entry.name)
            _visit(entry.name, dir_fd, old, new, result, clock() <= deadline, st)
    return folders


def _visit(
    name: str,
    dir_fd: int,
    old: tuple[int, int],
    new: tuple[int, int],
    result: ReownResult,
    in_time: bool,
    st: os.stat_result | None = None,
) -> None:
    if in_time:
        _reown_entry(name, dir_fd, old, new, result)
        return
    try:
        st = st or os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if st.st_uid == old[0] or st.st_gid == old[1]:
        result.left += 1


def _reown_entry(
    name: str, dir_fd: int, old: tuple[int, int], new: tuple[int, int], result: ReownResult
) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    uid = new[0] if st.st_uid == old[0] else -1
    gid = new[1] if st.st_gid == old[1] else -1
    if uid == -1 and gid == -1:
        return
    with contextlib.suppress(OSError):
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        result.changed += 1
