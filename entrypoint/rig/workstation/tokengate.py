"""A secret handed to a service on its stdin only once no other process can read it there.

A session of the service's user (the same uid) can ptrace the new process in the moment between its
exec and its `prctl(PR_SET_DUMPABLE, 0)` (rig.workstation.labserver), make it dumpable again, and
read the secret from the traced `read(0)`. So the supervisor leaves the pipe empty at the start and
writes the secret only when /proc says the process is the service's own program (its argv), is
not dumpable (its /proc files are no longer its user's: root's, or the overflow uid in a user
namespace) and has no tracer (`TracerPid: 0`); once it is not
dumpable, no process of the user can attach any more. A traced process, or one that never becomes
non-dumpable, gets nothing: the pipe is closed empty and the service fails to start (and is
started again, with the same check).

`verdict` decides from what /proc shows (pure); `hand` polls and writes (thin).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

GIVE, WAIT, REFUSE = "give", "wait", "refuse"
DEADLINE_S = 20.0  # from the start to the prctl: an interpreter's start and a few imports
POLL_S = 0.005


def verdict(
    cmdline: bytes, argv: Sequence[str], owner_uid: int, service_uid: int, status: str
) -> tuple[str, str]:
    """What to do now, and why: GIVE the secret, WAIT (not the service's program yet, or still
    dumpable), or REFUSE (a tracer is attached)."""
    tracer = next(
        (line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("TracerPid:")), ""
    )
    if tracer not in {"", "0"}:
        return REFUSE, f"it is traced by pid {tracer}"
    if cmdline.split(b"\0")[: len(argv)] != [a.encode() for a in argv]:
        return WAIT, "it has not started the service's program yet"
    if owner_uid == service_uid:
        return WAIT, "it is still dumpable (its /proc files are its user's)"
    return GIVE, ""


def look(pid: int, argv: Sequence[str], service_uid: int, proc: Path = Path("/proc")) -> tuple[str, str]:
    """verdict for the process pid as /proc shows it now; REFUSE once it is gone."""
    where = proc / str(pid)
    try:
        cmdline = (where / "cmdline").read_bytes()
        status = (where / "status").read_text()
        owner = os.stat(where / "status").st_uid  # root's once not dumpable (the folder stays the user's)
    except OSError:
        return REFUSE, "it ended before it was given its token"
    return verdict(cmdline, argv, owner, service_uid, status)


def hand(
    pid: int,
    argv: Sequence[str],
    service_uid: int,
    secret: bytes,
    write_fd: int,
    *,
    proc: Path = Path("/proc"),
    deadline_s: float | None = None,  # None: DEADLINE_S
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Write secret to write_fd once `look` says GIVE, then close it; closed empty on REFUSE or at the
    deadline. Returns "" when given, else why not."""
    end = clock() + (DEADLINE_S if deadline_s is None else deadline_s)
    why = "it did not make itself non-dumpable in time"
    try:
        while clock() < end:
            what, reason = look(pid, argv, service_uid, proc)
            if what == GIVE:
                os.write(write_fd, secret)
                return ""
            if what == REFUSE:
                return reason
            why = reason
            sleep(POLL_S)
        return why
    finally:
        with contextlib.suppress(OSError):
            os.close(write_fd)
