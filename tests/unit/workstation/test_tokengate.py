"""The Jupyter token goes down the server's stdin only to a process no session could have traced:
its own program, not dumpable since its exec, untraced, not stopped, once it asks. Real child
processes, /proc as it is (the tests run as root, the children as uid 2001, the server's user,
from an execute-only copy of the interpreter as in the image); a refused start is not a failure."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rig.workstation import services, supervisor, tokengate
from rig.workstation.spec import ServiceSpec
from rig.workstation.supervisor import Policy, State, Status, Supervisor, after_exit
from rig.workstation.users import Ids

from tests.helpers import needs_root
from tests.helpers.waiting import wait_until

ARGV = ("/usr/bin/python3", "-m", "server")
STATUS = "Name:\tpython3\nState:\t{}\nTracerPid:\t{}\nUid:\t2001\n"


@pytest.mark.parametrize(
    ("cmdline", "owner", "tracer", "state", "what"),
    [
        (b"/usr/bin/python3\0-m\0server\0", 0, 0, "S (sleeping)", tokengate.GIVE),
        (b"/usr/bin/python3\0-m\0server\0", 65534, 0, "R (running)", tokengate.GIVE),  # a user namespace
        (b"rig\0serve\0", 0, 0, "R (running)", tokengate.WAIT),  # forked, not exec'd yet
        (b"/usr/bin/python3\0-m\0server\0", 2001, 0, "S (sleeping)", tokengate.FAIL),  # dumpable: traceable
        (b"/usr/bin/python3\0-m\0server\0", 0, 4242, "S (sleeping)", tokengate.REFUSE),  # a session attached
        (b"/usr/bin/python3\0-m\0server\0", 2001, 4242, "t (tracing stop)", tokengate.REFUSE),
        (b"/usr/bin/python3\0-m\0server\0", 0, 0, "T (stopped)", tokengate.REFUSE),  # SIGSTOP
        (b"rig\0serve\0", 0, 0, "T (stopped)", tokengate.REFUSE),  # stopped before its exec
        (b"", 0, 0, "Z (zombie)", tokengate.FAIL),
    ],
)
def test_the_verdict(cmdline: bytes, owner: int, tracer: int, state: str, what: str) -> None:
    assert tokengate.verdict(cmdline, ARGV, owner, 2001, STATUS.format(state, tracer))[0] == what


# The server's part: ask on stdin (the socket), then read the token.
SERVER = """
import contextlib, os, sys, time
time.sleep(float(sys.argv[1]))
with contextlib.suppress(OSError):  # the gate may have closed its end already (labserver's way too)
    os.write(0, b"?")
print("GOT", os.read(0, 100).decode().strip() or "nothing", flush=True)
"""


@pytest.fixture(scope="module")
def pythons() -> Iterator[dict[str, str]]:
    """The system's interpreter (one uid 2001 may run), readable as usual, and an execute-only copy
    (root's, 0711) as the image has."""
    readable = os.path.realpath("/usr/bin/python3")
    folder = Path(f"/tmp/rig-test-python-{os.getpid()}")
    folder.mkdir(mode=0o755)
    xonly = folder / "python-x"
    shutil.copy(readable, xonly)
    xonly.chmod(0o711)
    try:
        yield {"readable": readable, "execute-only": str(xonly)}
    finally:
        shutil.rmtree(folder)


def _serve(python: str, delay: float, deadline_s: float, stop: bool = False) -> tuple[str, tokengate.Outcome]:
    argv = (python, "-I", "-c", SERVER, str(delay))
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(argv, stdin=theirs, stdout=subprocess.PIPE, text=True, user=2001, group=2001)
    theirs.close()
    if stop:
        os.kill(proc.pid, signal.SIGSTOP)  # what a session of the same uid may do to a new server
    got: list[tokengate.Outcome] = []
    feeder = threading.Thread(
        target=lambda: got.append(
            tokengate.hand(proc.pid, argv, 2001, b"s3cret\n", ours, deadline_s=deadline_s)
        )
    )
    feeder.start()
    feeder.join(timeout=60)
    if stop:
        os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate(timeout=30)
    return out.strip(), got[0]


@needs_root
def test_only_a_server_never_dumpable_gets_the_token_once_it_asks(pythons: dict[str, str]) -> None:
    out, got = _serve(pythons["execute-only"], 0.3, 60)
    assert (out, got) == ("GOT s3cret", tokengate.Outcome(True)), (out, got)
    # A readable interpreter: dumpable after its exec, so a session could have traced it.
    out, got = _serve(pythons["readable"], 0.3, 60)
    assert out == "GOT nothing" and not got.given and not got.refused and "dumpable" in got.why, (out, got)
    # Stopped by a session before it asked: refused, the session's act.
    out, got = _serve(pythons["execute-only"], 0.3, 60, stop=True)
    assert out == "GOT nothing" and got.refused and "stopped" in got.why, (out, got)
    # Never asking: nothing, at the deadline.
    out, got = _serve(pythons["execute-only"], 1.5, 0.5)
    assert out == "GOT nothing" and not got.given and "did not ask" in got.why, (out, got)


def test_a_traced_server_gets_nothing(tmp_path: Path) -> None:
    # A fake /proc: the process as a session's ptrace leaves it, its tracer named.
    (tmp_path / "77").mkdir()
    (tmp_path / "77/cmdline").write_bytes(b"/usr/bin/python3\0-m\0server\0")
    (tmp_path / "77/status").write_text(STATUS.format("S (sleeping)", 4242))
    ours, theirs = socket.socketpair()
    got = tokengate.hand(77, ARGV, 2001, b"s3cret", ours, proc=tmp_path)
    assert got == tokengate.Outcome(False, "it is traced by pid 4242", refused=True)
    assert theirs.recv(100) == b""  # closed empty
    theirs.close()


@needs_root
def test_the_supervisor_hands_jupyters_token_through_the_gate(
    pythons: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert services.jupyter_spec({}, Ids(2001, 2001), lambda: "s" * 20).stdin_guarded
    for python, got, deadline in (
        (pythons["execute-only"], "GOT s3cret", 60.0),
        (pythons["readable"], "GOT nothing", 5.0),
    ):
        monkeypatch.setattr(tokengate, "DEADLINE_S", deadline)
        spec = ServiceSpec("probe", (python, "-I", "-c", SERVER, "0.3"), 1, ids=Ids(2001, 2001))
        spec = dataclasses.replace(spec, stdin=lambda: b"s3cret\n", stdin_guarded=True, cwd=Path("/tmp"))
        proc = supervisor.spawn(spec)
        out, _ = proc.communicate(timeout=60)
        assert out.decode().strip() == got, (python, out)


# ---- a refused start is the session's act: it never spends the restart budget ---------------------
POLICY = Policy(max_failures=3, backoff_base=0.2, backoff_cap=1, stable_after=60)


def test_refused_starts_count_no_failure() -> None:
    s = Status(State.STARTING, since=0, failures=2)
    for now in range(1, 20):
        s = after_exit(Status(State.STARTING, now - 1, s.failures), now, POLICY, users_own=True, refused=True)
        assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 2, now + 0.2)
    s = after_exit(Status(State.STARTING, 0, s.failures), 1, POLICY, users_own=True)  # its own failure
    assert s.state is State.FATAL


@needs_root
def test_a_session_stopping_every_new_server_never_makes_the_workstation_fatal(
    pythons: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five starts in a row stopped before they ask (as a session of their uid may, here the moment
    each is started), for as long as the gate takes to look, then let go; POLICY's budget is 3: each
    is refused and started again, never counted."""
    stopped: list[int] = []
    popen = supervisor._popen

    def started_then_stopped(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = popen(*args, **kwargs)  # type: ignore[arg-type]
        if len(stopped) < 5:
            os.kill(proc.pid, signal.SIGSTOP)  # it sleeps 0.5 s before it asks: stopped well before
            stopped.append(proc.pid)
            threading.Timer(0.2, lambda: _cont(proc.pid)).start()  # the gate looks every 5 ms
        return proc

    monkeypatch.setattr(supervisor, "_popen", started_then_stopped)
    # A port of its own: the supervisor guards its IPv6 side (another test file may hold port 1).
    port = _free_port()
    spec = ServiceSpec("lab", (pythons["execute-only"], "-I", "-c", SERVER, "0.5"), port, ids=Ids(2001, 2001))
    spec = dataclasses.replace(spec, stdin=lambda: b"s3cret\n", stdin_guarded=True, cwd=Path("/tmp"))
    sup = Supervisor([spec], policy=POLICY, probe=lambda _port, _pid: ())
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    try:
        # The sixth start, once the fifth stopped one has ended: nothing counted so far.
        wait_until(lambda: len(stopped) == 5, timeout=60)
        wait_until(lambda: (p := sup.procs.get("lab")) is not None and p.pid not in stopped, timeout=60)
        assert not result and sup.status["lab"].state is not State.FATAL, sup.status
        assert sup.status["lab"].failures == 0, sup.status
    finally:
        sup.events.put(signal.SIGTERM)
        thread.join(timeout=30)
    assert result == [0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::", 0))
        return int(s.getsockname()[1])


def _cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
