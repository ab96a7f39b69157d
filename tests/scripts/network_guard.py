"""Record every attempt to reach the network, for tests that must run offline.

Imported first by the offline scripts: it wraps name resolution and socket connects so that an
attempt is recorded even when `--network none` makes it fail fast and a library swallows the error.
"""

import atexit
import json
import os
import socket
import sys

ATTEMPTS: list[str] = []
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0", "")


def _is_local(host: object) -> bool:
    return isinstance(host, str) and (host.startswith(_LOCAL) or host == "")


_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex


def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if not _is_local(host):
        ATTEMPTS.append(f"resolve {host}")
    return _getaddrinfo(host, *args, **kwargs)


def _check(address: object) -> None:
    if isinstance(address, tuple) and address and not _is_local(address[0]):
        ATTEMPTS.append(f"connect {address[0]}:{address[1] if len(address) > 1 else ''}")


def connect(self, address):  # type: ignore[no-untyped-def]
    _check(address)
    return _connect(self, address)


def connect_ex(self, address):  # type: ignore[no-untyped-def]
    _check(address)
    return _connect_ex(self, address)


socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect  # type: ignore[method-assign]
socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]


@atexit.register
def _report() -> None:
    path = os.environ.get("NETWORK_GUARD_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(ATTEMPTS, f)
    if ATTEMPTS:
        print(f"network_guard: {len(ATTEMPTS)} network attempt(s): {ATTEMPTS[:5]}", file=sys.stderr)
