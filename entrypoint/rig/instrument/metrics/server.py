"""The /metrics HTTP server: bounded in threads and in time, answering only whom access allows.

prometheus-client's own server starts a thread for every connection and waits on each for good:
300 idle connections that never finished a request held 300 threads (and the container's pids)
until the run ended. Here at most SLOTS connections are served at once, each within REQUEST_S of
its accept, however slowly its bytes come; a connection beyond the slots, or from a peer that
rig.instrument.metrics.access refuses, is closed at once, before any thread or read. Requests are not
logged (rig's log lines are its own decisions, not a scraper's visits).
"""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from rig.instrument.metrics import access as access_rules

SLOTS = 8  # connections served at once: a scrape takes milliseconds
REQUEST_S = 10.0  # from accept to the last byte of the answer; Prometheus' default scrape timeout

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Deadline(io.RawIOBase):
    """A socket's reads, ending at a deadline (a client sending a byte a second included)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not received in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        self._deadline = time.monotonic() + REQUEST_S
        self.rfile = io.BufferedReader(_Deadline(self.connection, self._deadline))

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        # The answer is sent within what is left of the deadline (at least a second).
        self.connection.settimeout(max(self._deadline - time.monotonic(), 1.0))
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: connections over the slots are accepted to be closed

    def __init__(self, address: tuple[Any, ...], family: int, access: access_rules.Access) -> None:
        self.address_family = family
        self.access = access
        self._slots = threading.BoundedSemaphore(SLOTS)
        super().__init__(address, _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        if not access_rules.may_connect(self.access, str(client_address[0])):
            return False
        return self._slots.acquire(blocking=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out or went away: nothing to report


def _guarded(app: App, access: access_rules.Access) -> App:
    def guarded(request: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        # request: the WSGI environ, the request's own values (not the process environment)
        peer, authorization = request.get("REMOTE_ADDR", ""), request.get("HTTP_AUTHORIZATION", "")
        code = access_rules.status(access, peer, authorization)
        if code == 200:
            return app(request, start_response)
        body = b"a bearer token is required (Authorization: Bearer ...)\n" if code == 401 else b"forbidden\n"
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
        if code == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="metrics"'))
        start_response(f"{code} {HTTPStatus(code).phrase}", headers)
        return [body]

    return guarded


def serve(addr: str, port: int, app: App, access: access_rules.Access) -> _Server:
    """app on addr:port in a daemon thread, within the bounds above; OSError when it cannot listen.
    Stop it with shutdown() then server_close()."""
    family, _, _, _, sockaddr = socket.getaddrinfo(
        addr or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server = _Server(sockaddr, family, access)
    server.set_app(_guarded(app, access))
    threading.Thread(target=server.serve_forever, name="rig-metrics", daemon=True).start()
    return server
