"""Who may read /metrics: this host, or whoever sends the bearer token of RIG_METRICS_TOKEN_FILE.

Without a token the server answers only its own loopback and its network's gateways. Docker's
published port (compose publishes 9464 on the host's loopback only) reaches a container from the
gateway of its network, and so does any process of the host itself; other containers on the same
network connect from their own addresses and are refused before anything is read. With a token
(a file, so that it is in no environment and no `docker inspect`), every request must carry
`Authorization: Bearer TOKEN`, as Prometheus sends it from `authorization: {credentials_file: ...}`:
the way for a scraper elsewhere (another container, pod or node).

The decisions are pure; the gateways are read from a /proc root (fake in the tests).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

_RTF_GATEWAY = 0x2  # the route's flag for "through a gateway" (linux/route.h)


@dataclass(frozen=True)
class Access:
    token: str | None  # None: this host only
    gateways: frozenset[str] = frozenset()


def _address(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # a dual-stack socket's IPv4 peer
    return ip


def may_connect(access: Access, peer: str) -> bool:
    """Whether a connection from peer is served at all (with a token: every peer, to be asked for it)."""
    if access.token is not None:
        return True
    ip = _address(peer)
    return ip is not None and (ip.is_loopback or str(ip) in access.gateways)


def status(access: Access, peer: str, authorization: str) -> int:
    """The answer to a request: 200 (served), 401 (no or a wrong token), 403 (not this host)."""
    if access.token is None:
        return 200 if may_connect(access, peer) else 403
    scheme, _, given = authorization.strip().partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), access.token.encode())
    return 200 if ok else 401


def gateways(proc: Path = Path("/proc")) -> frozenset[str]:
    """The addresses this machine's routes go through (IPv4 and IPv6), from /proc/net."""
    found: set[str] = set()
    try:
        lines = (proc / "net/route").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and int(fields[3], 16) & _RTF_GATEWAY:
            found.add(socket.inet_ntoa(struct.pack("<I", int(fields[2], 16))))
    try:
        lines6 = (proc / "net/ipv6_route").read_text().splitlines()
    except OSError:
        lines6 = []
    for line in lines6:
        fields = line.split()
        if len(fields) >= 9 and int(fields[8], 16) & _RTF_GATEWAY and int(fields[4], 16):
            found.add(str(ipaddress.IPv6Address(bytes.fromhex(fields[4]))))
    return frozenset(found)
