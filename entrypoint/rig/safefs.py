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
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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


def distrust(st: os.stat_result, uid: int, *, folder: bool) -> str | None:
    """Why an entry (its lstat or fstat) is not one uid may trust: a link, not the kind wanted, another
    user's, writable by others (group or world: they could swap what is inside); None when it is."""
    want = stat.S_ISDIR if folder else stat.S_ISREG
    if not want(st.st_mode):
        return f"is {kind(st.st_mode)}, not {'a folder' if folder else 'a regular file'}"
    if st.st_uid != uid:
        return f"belongs to {owner_name(st.st_uid)}, not to you ({owner_name(uid)})"
    if st.st_mode & 0o022:
        return f"can be written by others (mode {stat.S_IMODE(st.st_mode):04o}); chmod go-w it"
    if folder and st.st_mode & 0o700 != 0o700:
        return f"cannot be listed and entered by you (mode {stat.S_IMODE(st.st_mode):04o}); chmod u+rwx it"
    return None


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
