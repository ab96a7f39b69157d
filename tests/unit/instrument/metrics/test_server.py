"""rig.instrument.metrics.server over real sockets: idle and slow clients cost a bounded number of
threads for a bounded time; a token is asked for and checked."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from rig.instrument.metrics import server
from rig.instrument.metrics.access import Access

from tests.helpers.metrics import free_port


def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok\n"]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(server, "REQUEST_S", 1.0)
    port = free_port()
    http = server.serve("127.0.0.1", port, hello, Access(None))
    try:
        yield port
    finally:
        http.shutdown()
        http.server_close()


def get(port: int, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(condition: Any, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_idle_half_sent_connections_hold_few_threads_and_go(served: int) -> None:
    before = threading.active_count()
    idle = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", served), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        idle.append(s)
    try:
        time.sleep(0.3)
        assert threading.active_count() <= before + server.SLOTS
        # Each served one ends at the deadline; the others were closed at once: back where it was.
        assert wait_for(lambda: threading.active_count() == before, 5), threading.active_count()
        assert get(served) == (200, "ok\n")
    finally:
        for s in idle:
            s.close()


def test_a_request_sent_a_byte_at_a_time_ends_at_the_deadline(served: int) -> None:
    s = socket.create_connection(("127.0.0.1", served), timeout=5)
    t0 = time.monotonic()
    closed = False
    try:
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            s.sendall(bytes([byte]))
            time.sleep(0.1)
    except OSError:
        closed = True  # reset by the server
    if not closed:
        closed = s.recv(1) == b""
    s.close()
    assert closed and time.monotonic() - t0 < 4


def test_with_a_token_every_request_must_send_it(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    http = server.serve("127.0.0.1", port, hello, Access("t" * 20))
    try:
        assert get(port)[0] == 401
        assert get(port, {"Authorization": "Bearer wrong"})[0] == 401
        assert get(port, {"Authorization": f"Bearer {'t' * 20}"}) == (200, "ok\n")
    finally:
        http.shutdown()
        http.server_close()


def test_a_refused_peer_is_closed_without_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # The decision itself is rig.instrument.metrics.access's (test_access.py); here, what the server does
    # with a refusal: loopback stands in for another container.
    monkeypatch.setattr(server.access_rules, "may_connect", lambda access, peer: False)
    port = free_port()
    http = server.serve("127.0.0.1", port, hello, Access(None))
    before = threading.active_count()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            answer = s.recv(100)
        except ConnectionResetError:
            answer = b""
        s.close()
        assert answer == b"" and threading.active_count() == before
    finally:
        http.shutdown()
        http.server_close()
