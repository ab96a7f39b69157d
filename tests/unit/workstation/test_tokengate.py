"""The Jupyter token goes down the server's stdin only once the server is its own program, not
dumpable and untraced: real child processes, /proc as it is (the tests run as root, the children
as uid 2001, the server's user)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from pathlib import Path

import pytest
from rig.workstation import services, supervisor, tokengate
from rig.workstation.spec import ServiceSpec
from rig.workstation.users import Ids

from tests.helpers import needs_root

ARGV = ("/usr/bin/python3", "-m", "server")
STATUS = "Name:\tpython3\nTracerPid:\t{}\nUid:\t2001\n"


@pytest.mark.parametrize(
    ("cmdline", "owner", "tracer", "what"),
    [
        (b"/usr/bin/python3\0-m\0server\0", 0, 0, tokengate.GIVE),
        (b"/usr/bin/python3\0-m\0server\0", 65534, 0, tokengate.GIVE),  # root unmapped: a user namespace
        (b"/usr/bin/python3\0-m\0server\0", 2001, 0, tokengate.WAIT),  # still dumpable
        (b"rig\0serve\0", 0, 0, tokengate.WAIT),  # forked, not exec'd yet (root's, the supervisor's argv)
        (b"/usr/bin/python3\0-m\0server\0", 0, 4242, tokengate.REFUSE),  # a session attached first
        (b"/usr/bin/python3\0-m\0server\0", 2001, 4242, tokengate.REFUSE),  # and made it dumpable again
    ],
)
def test_the_verdict(cmdline: bytes, owner: int, tracer: int, what: str) -> None:
    assert tokengate.verdict(cmdline, ARGV, owner, 2001, STATUS.format(tracer))[0] == what


SERVER = """
import ctypes, os, sys
if sys.argv[1] == "guarded":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as the server does first
print("GOT", os.read(0, 100).decode().strip() or "nothing", flush=True)
"""


def _serve(mode: str, deadline_s: float) -> tuple[str, str]:
    argv = ("/usr/bin/python3", "-c", SERVER, mode)  # one uid 2001 may run
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(argv, stdin=read_end, stdout=subprocess.PIPE, text=True, user=2001, group=2001)
    os.close(read_end)
    why: list[str] = []
    feeder = threading.Thread(
        target=lambda: why.append(
            tokengate.hand(proc.pid, argv, 2001, b"s3cret\n", write_end, deadline_s=deadline_s)
        )
    )
    feeder.start()
    out, _ = proc.communicate(timeout=30)
    feeder.join(timeout=30)
    return out.strip(), why[0]


@needs_root
def test_a_server_that_makes_itself_non_dumpable_gets_the_token_one_that_does_not_gets_nothing() -> None:
    assert _serve("guarded", 60) == ("GOT s3cret", "")  # the deadline: only a very slow start meets it
    out, why = _serve("dumpable", 1)  # what a session that flipped the flag back leaves
    assert out == "GOT nothing" and "still dumpable" in why, (out, why)


def test_a_traced_server_gets_nothing(tmp_path: Path) -> None:
    # A fake /proc: the process as a session's ptrace leaves it, its tracer named.
    proc = tmp_path
    (proc / "77").mkdir()
    (proc / "77/cmdline").write_bytes(b"/usr/bin/python3\0-m\0server\0")
    (proc / "77/status").write_text(STATUS.format(4242))
    read_end, write_end = os.pipe()
    assert tokengate.hand(77, ARGV, 2001, b"s3cret", write_end, proc=proc) == "it is traced by pid 4242"
    assert os.read(read_end, 100) == b""  # closed empty
    os.close(read_end)


@needs_root
def test_the_supervisor_hands_jupyters_token_through_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    assert services.jupyter_spec({}, Ids(2001, 2001), lambda: "s" * 20).stdin_guarded
    for mode, got, deadline in (("guarded", "GOT s3cret", 60.0), ("dumpable", "GOT nothing", 1.0)):
        monkeypatch.setattr(tokengate, "DEADLINE_S", deadline)
        spec = ServiceSpec("probe", ("/usr/bin/python3", "-c", SERVER, mode), 1, ids=Ids(2001, 2001))
        spec = dataclasses.replace(spec, stdin=lambda: b"s3cret\n", stdin_guarded=True, cwd=Path("/tmp"))
        proc = supervisor.spawn(spec)
        out, _ = proc.communicate(timeout=60)
        assert out.decode().strip() == got, (mode, out)
