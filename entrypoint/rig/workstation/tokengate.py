"""A secret handed to a service on its stdin only to a process no session could ever have traced.

A session runs as the service's user (the same uid): it may ptrace a process of that uid, or take
its descriptors (pidfd_getfd), while the process is dumpable, and it may stop it (SIGSTOP) at any
time. So the service's program is one its user may execute but not read (rig.workstation.services:
an execute-only copy of the interpreter): the kernel makes such a process non-dumpable from its exec
on, and since the supervisor's fork changed its uid before that, at no moment can a session attach
to it or open its /proc files, its memory or its descriptors.

The service's stdin is one end of a socket pair; the supervisor keeps the other. The server asks
for its secret (one byte) once it is ready to read it; the gate then looks at /proc and writes the
secret only when the process runs the service's own program (its argv), is not dumpable (its /proc
files are no longer its user's: root's, or the overflow uid in a user namespace), has no tracer
(`TracerPid: 0`) and is not stopped. Until then it looks every POLL_S, from the start, and:
- a tracer, or a stopped process, is REFUSE: the session's act. The secret is never written, the
  start is ended, and it does not count as the service failing (rig.workstation.supervisor);
- the program dumpable after its exec (it could have been traced: a readable interpreter) or gone
  is FAIL: the service's own failure, counted as any failure to start is.

`verdict` decides from what /proc shows (pure); `hand` polls, waits for the ask and writes (thin).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

GIVE, WAIT, REFUSE, FAIL = "give", "wait", "refuse", "fail"
ASK = b"?"  # what the server sends when it is ready to read its secret
DEADLINE_S = 20.0  # from the start to the ask: an interpreter's start and a few imports
POLL_S = 0.005


@dataclass(frozen=True)
class Outcome:
    given: bool
    why: str = ""  # why not given
    refused: bool = False  # the session's act (a tracer, a stop), not the service failing


def _field(status: str, name: str) -> str:
    return next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith(name)), "")


def verdict(
    cmdline: bytes, argv: Sequence[str], owner_uid: int, service_uid: int, status: str
) -> tuple[str, str]:
    """What to do now, and why: GIVE the secret, WAIT (not the service's program yet), REFUSE (traced
    or stopped: a session's doing) or FAIL (its program dumpable after its exec, or ended)."""
    tracer = _field(status, "TracerPid:")
    if tracer not in {"", "0"}:
        return REFUSE, f"it is traced by pid {tracer}"
    state = _field(status, "State:")
    if state[:1] in {"T", "t"}:
        return REFUSE, f"it is stopped ({state})"
    if state[:1] in {"Z", "X"}:
        return FAIL, "it ended before it was given its token"
    if cmdline.split(b"\0")[: len(argv)] != [a.encode() for a in argv]:
        return WAIT, "it has not started the service's program yet"
    if owner_uid == service_uid:
        return FAIL, (
            "it was dumpable after its exec (its program can be read by its user), so a session could "
            "have traced it"
        )
    return GIVE, ""


def look(pid: int, argv: Sequence[str], service_uid: int, proc: Path = Path("/proc")) -> tuple[str, str]:
    """verdict for the process pid as /proc shows it now; FAIL once it is gone."""
    where = proc / str(pid)
    try:
        cmdline = (where / "cmdline").read_bytes()
        status = (where / "status").read_text()
        owner = os.stat(where / "status").st_uid  # root's once not dumpable (the folder stays the user's)
    except OSError:
        return FAIL, "it ended before it was given its token"
    return verdict(cmdline, argv, owner, service_uid, status)


def _asked(sock: socket.socket, timeout: float) -> bool | None:
    """Whether the server asked within timeout; None: it closed its end (it ended)."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return False
    try:
        got = sock.recv(1)
    except OSError:
        return None
    return True if got == ASK else None


def hand(
    pid: int,
    argv: Sequence[str],
    service_uid: int,
    secret: bytes,
    sock: socket.socket,
    *,
    proc: Path = Path("/proc"),
    deadline_s: float | None = None,  # None: DEADLINE_S
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Write secret to sock once the server asked for it and `look` says GIVE, then close it; closed
    empty on REFUSE, FAIL or at the deadline."""
    end = clock() + (DEADLINE_S if deadline_s is None else deadline_s)
    why = "it did not ask for its token in time"
    asked: bool | None = False
    try:
        while clock() < end:
            what, reason = look(pid, argv, service_uid, proc)
            if what in (REFUSE, FAIL):
                return Outcome(False, reason, refused=what == REFUSE)
            if what == GIVE and asked:
                sock.sendall(secret)
                return Outcome(True)
            why = reason if what == WAIT else "it did not ask for its token in time"
            if asked:
                time.sleep(POLL_S)
                continue
            asked = _asked(sock, POLL_S)
            if asked is None:
                return Outcome(False, "it closed its stdin before it was given its token")
        return Outcome(False, why)
    finally:
        with contextlib.suppress(OSError):
            sock.close()
