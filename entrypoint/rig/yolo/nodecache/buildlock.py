"""Waiting for a flock without hanging: the node image cache's build lock (`KEY.lock`) and its hold.

Whoever builds a key holds an exclusive flock on KEY.lock while the others wait, then map the file
it made. A wait never hangs: it goes on while the holder's build grows (a big dataset takes
minutes, and a second job on the same images should map the file rather than decode its own), and
ends once nothing has grown for the stall limit (RIG_CACHE_LOCK_STALL_S): a holder that builds
nothing (a stuck process, or one that only took the lock) costs the run its node cache, never the
run. Whoever waits says for whom, once: the holder's pid and command from /proc/locks, as far as
this container sees it (another container's or node's process is not in its /proc).

Opens never follow a link and never block (a FIFO at the lock's path), and the lock file must be
a regular file that passes rig.safefs's trust rule (this user's or root's, writable by no one else
but RIG_SHARE_GROUP's group): anything else there is removed and made anew (`open_lock`).
Discovery takes the /proc root, so the tests use a fake one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rig import envnumbers, log, safefs

STALL_ENV = "RIG_CACHE_LOCK_STALL_S"
DEFAULT_STALL_S = 60.0
POLL_S = 0.2
_CMDLINE_MAX = 4096
_SHOWN_CHARS = 120
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Stalled(Exception):
    """The lock is still held and its holder's build has not grown for the stall limit."""


class Refused(Exception):
    """What is at a path is not a regular file of this user's; the message says what it is."""


STALL = envnumbers.Number(
    STALL_ENV,
    low=0,
    default=DEFAULT_STALL_S,
    unit="seconds",
    hint="how long a wait for another process's image cache build may go on while that build does not grow",
)


def stall_s(environ: Mapping[str, str]) -> float:
    """RIG_CACHE_LOCK_STALL_S: seconds a wait goes on without the holder's build growing."""
    return STALL.read(environ)


def open_own(path: Path, flags: int = os.O_RDONLY) -> int:
    """A (blocking) descriptor of path, a regular file that passes rig.safefs's trust rule:
    FileNotFoundError when there is nothing, Refused for anything else, found without following a
    link and before anything could block on a FIFO."""
    who = safefs.trust()
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, 0o600)  # created (O_CREAT): private, whatever the umask
    except FileNotFoundError:
        raise
    except OSError as e:  # ELOOP: a link; EISDIR; ENXIO: a socket; EACCES: someone else's
        try:
            why = safefs.distrust(os.lstat(path), who, folder=False)
        except OSError:
            why = None
        raise Refused(why or f"cannot be opened ({e.strerror or e})") from None
    why = safefs.distrust(os.fstat(fd), who, folder=False)
    if why is not None:
        os.close(fd)
        raise Refused(why)
    os.set_blocking(fd, True)
    return fd


def open_lock(path: Path) -> int:
    """KEY.lock opened for flock, created when missing (0600, never through a link); a planted one
    (a link, a FIFO, a folder, someone else's file) is removed and made anew."""
    for _ in range(2):
        try:
            return open_own(path, os.O_RDWR | os.O_CREAT)
        except Refused:
            remove(path)
    return open_own(path, os.O_RDWR | os.O_CREAT)


def remove(path: Path) -> None:
    """Remove what is at path, whatever it is (a folder with its files; links are removed, never
    followed); OSError when it cannot be."""
    try:
        is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    if is_dir:
        import shutil  # only for this rare case

        shutil.rmtree(path)  # works on descriptors: never follows a link inside
    else:
        os.unlink(path)


# ---------------------------------------------------------------------------------------------
# Who holds it (parse pure; discovery through a /proc root)


def holders(locks: str, dev: int, ino: int) -> list[int]:
    """The pids /proc/locks gives as holding a lock on the file (dev, ino), waiters left out. Lines:
    `1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF`; a waiter's has `->` after the number."""
    exact = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    found, by_inode = [], []
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->" or not fields[4].isdigit():
            continue
        if fields[5] == exact:
            found.append(int(fields[4]))
        elif fields[5].rpartition(":")[2] == str(ino):  # an overlay reports its own device
            by_inode.append(int(fields[4]))
    return found or by_inode


def describe_pid(pid: int, proc: Path = Path("/proc")) -> str:
    """'pid 1234 (python -m rig.launch.trainer data=...)', the command cut short and made printable."""
    try:
        with open(proc / str(pid) / "cmdline", "rb") as f:
            raw = f.read(_CMDLINE_MAX)
    except OSError:
        return f"pid {pid}"
    command = log.printable(raw.rstrip(b"\0").replace(b"\0", b" "))
    if len(command) > _SHOWN_CHARS:
        command = command[: _SHOWN_CHARS - 3] + "..."
    return f"pid {pid} ({command})" if command else f"pid {pid}"


def holder(fd: int, proc: Path = Path("/proc")) -> str:
    """Who holds a lock on the file open at fd, in words."""
    st = os.fstat(fd)
    try:
        locks = (proc / "locks").read_text(errors="replace")
    except OSError:
        locks = ""
    pids = holders(locks, st.st_dev, st.st_ino)
    if not pids:
        return "a process this container cannot see (another container or node sharing the folder)"
    return ", ".join(describe_pid(p, proc) for p in pids[:3])


# ---------------------------------------------------------------------------------------------
# Waiting


@dataclass(frozen=True)
class Wait:
    """How to wait: the stall limit, what measures the holder's progress, whom to tell."""

    stall_s: float
    progress: Callable[[], int] = lambda: 0  # e.g. the bytes of the holder's temporary file
    on_wait: Callable[[str], None] = lambda who: None  # called once, with the holder in words
    proc: Path = Path("/proc")
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def flock(fd: int, operation: int, wait: Wait) -> None:
    """flock(fd, operation) (LOCK_EX or LOCK_SH), waiting while the holder makes progress; Stalled
    (naming the holder) once it has not for wait.stall_s; OSError where there are no file locks."""
    last, since, told = wait.progress(), wait.clock(), ""
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if not told:
            told = holder(fd, wait.proc)
            wait.on_wait(told)
        now = wait.progress()
        if now != last:
            last, since = now, wait.clock()
        elif wait.clock() - since >= wait.stall_s:
            raise Stalled(
                f"held by {holder(fd, wait.proc)}, with no progress for {wait.stall_s:g} s "
                f"(end that process, or raise {STALL_ENV})"
            )
        wait.sleep(POLL_S)


def tmp_bytes(directory: Path, key: str) -> int:
    """The bytes of the builds of key under way (their KEY.PID.tmp files): a build's progress."""
    total = 0
    for p in directory.glob(f"{key}.*.tmp"):
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
