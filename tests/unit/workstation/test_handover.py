"""A service's port is its own: the supervisor holds JupyterLab's and TensorBoard's ports and hands
them over (real sockets on loopback, real child processes); a service that binds its own port (sshd)
is RUNNING only once it holds every socket listening there (the real /proc of this machine)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import handover
from rig.workstation.listening import listeners
from rig.workstation.spec import ServiceSpec
from rig.workstation.supervisor import Policy, State, Supervisor

from tests.helpers.containers import free_port
from tests.helpers.waiting import wait_until

# A served service: takes the socket rig serve handed it, says it serves, answers each connection
# with its pid. The variables must be gone from its environment, and its children must not inherit
# the descriptors.
HANDED_SERVICE = """
import os, socket, subprocess, sys
from rig.workstation import handover
taken = handover.take()
leaked = [n for n in (handover.LISTEN_FD_ENV, handover.READY_FD_ENV) if n in os.environ]
child = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True, close_fds=False)
child = child.stdout.split()
inherited = sorted({str(taken.listener.fileno()), str(taken.ready_fd)} & set(child))
taken.ready()
while True:
    conn, _ = taken.listener.accept()
    conn.sendall(f"{os.getpid()} leaked={leaked} inherited={inherited}".encode())
    conn.close()
"""


def _binds(family: socket.AddressFamily, host: str, port: int) -> str:
    """What binding and listening on (host, port) gives another process: 'ok' or the error."""
    with socket.socket(family) as s:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
        except OSError as e:
            return e.strerror or str(e)
    return "ok"


def _ask(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as c:
        return c.recv(200).decode()


def _supervise(sup: Supervisor) -> threading.Thread:
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    return thread


def test_a_held_port_cannot_be_taken_and_outlives_its_service(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(handover.__file__).parents[2])}
    spec = ServiceSpec("web", (sys.executable, "-c", HANDED_SERVICE), port, env, listen="127.0.0.1")
    state = tmp_path / "services.json"
    sup = Supervisor([spec], policy=Policy(backoff_base=0.2), state_file=state)
    thread = _supervise(sup)
    try:
        wait_until(lambda: sup.status["web"].state is State.RUNNING)
        first = sup.procs["web"].pid
        answer = _ask(port)
        assert answer == f"{first} leaked=[] inherited=[]", answer
        # services.json names the very socket /proc/net/tcp shows listening on the port.
        recorded = json.loads(state.read_text())["web"]["inodes"]
        assert recorded == [entry.inode for entry in listeners(port)] == [sup.held["web"].inode]
        os.kill(first, signal.SIGKILL)  # what a session may do to its own JupyterLab
        wait_until(lambda: "web" not in sup.procs or sup.procs["web"].pid != first, timeout=10, interval=0.01)
        # Down or restarting: no other process can listen on the port, on either family.
        assert _binds(socket.AF_INET, "127.0.0.1", port) == "Address already in use"
        assert _binds(socket.AF_INET, "0.0.0.0", port) == "Address already in use"
        if socket.has_ipv6:
            assert _binds(socket.AF_INET6, "::", port) in (
                "Address already in use",
                "Address family not supported by protocol",
            )
        # A client that came meanwhile waits in the queue and is answered by the next start.
        answer = _ask(port)
        assert answer.split()[0] != str(first) and answer.endswith("leaked=[] inherited=[]"), answer
        wait_until(lambda: sup.status["web"].state is State.RUNNING)
    finally:
        sup.events.put(signal.SIGTERM)
        thread.join(timeout=20)
    assert _binds(socket.AF_INET, "127.0.0.1", port) == "ok"  # released when rig serve stops


def test_a_port_taken_before_the_start_is_one_clear_line() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(
            RigError, match=rf"cannot listen on 127.0.0.1 port {port} \(Address already in use\)"
        ):
            handover.hold("127.0.0.1", port)


def test_take_needs_what_rig_serve_hands_over() -> None:
    with pytest.raises(RigError, match="start this service with `rig serve`"):
        handover.take({})


# A service that binds its own port (like sshd), once the file `go` exists.
OWN_BINDER = """
import pathlib, socket, sys, time
go = pathlib.Path(sys.argv[1])
while not go.exists():
    time.sleep(0.05)
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen()
time.sleep(60)
"""


def test_a_service_is_running_only_once_the_listener_on_its_port_is_its_own(tmp_path: Path) -> None:
    port = free_port()
    go = tmp_path / "go"
    spec = ServiceSpec("own", (sys.executable, "-c", OWN_BINDER, str(go), str(port)), port, dict(os.environ))
    sup = Supervisor([spec], policy=Policy(start_timeout=60), state_file=tmp_path / "services.json")
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()  # another process listens where the service will
    thread = _supervise(sup)
    try:
        wait_until(lambda: "own" in sup.procs)
        time.sleep(1)  # five ticks: the port listens, but not in the service's process
        assert sup.status["own"].state is State.STARTING
        assert json.loads((tmp_path / "services.json").read_text())["own"]["state"] == "starting"
        squatter.close()
        go.touch()
        wait_until(lambda: sup.status["own"].state is State.RUNNING)
        assert sup.inodes["own"] == tuple(entry.inode for entry in listeners(port))
    finally:
        squatter.close()
        sup.events.put(signal.SIGTERM)
        thread.join(timeout=20)


def test_the_ipv6_side_of_a_self_binding_services_port_is_guarded() -> None:
    port = free_port()
    guard = handover.block_ipv6(port)
    if guard is None:
        pytest.skip("no IPv6 on this host")
    try:
        assert _binds(socket.AF_INET6, "::", port) == "Address already in use"
        assert _binds(socket.AF_INET, "0.0.0.0", port) == "ok"  # sshd's own IPv4 bind is untouched
        with pytest.raises(RigError, match=rf"cannot listen on :: port {port}"):
            handover.block_ipv6(port)
    finally:
        guard.close()
