"""A port the supervisor holds for a service, and how each start of the service gets it.

Any process of the container may bind a free port: a session that kills its own JupyterLab could
listen on 8888 before the next one starts and receive the browser's token. So `rig serve` (root)
binds and listens on JupyterLab's and TensorBoard's ports itself, before any service starts, and
keeps the sockets for its whole life; each start of the service gets a duplicate (systemd's
socket activation, by another name). The kernel refuses every other bind that overlaps a
listening socket, so the port cannot be taken; while the service is down (killed, restarting),
connections wait in the socket's queue for the next one. For an IPv4 address, the port on every
IPv6 address (`::`, IPV6_V6ONLY) is bound too, without listening: nobody can listen there, and a
client that tries `localhost` as ::1 first is refused at once and falls back to 127.0.0.1. sshd,
which binds its own port (on IPv4), gets the same IPv6 guard (`block_ipv6`). Not
held: the port on the container's other IPv4 addresses when the service listens on 127.0.0.1 only
(TensorBoard); nothing connects there, and `rig health` reports such a listener.

The service finds its descriptors in two variables, spelled here alone: RIG_LISTEN_FD, the listening
socket, and RIG_READY_FD, a pipe on which it writes one line once it serves (the supervisor calls
it RUNNING then). `take` makes both non-inheritable at once, so the kernels, terminals and
language servers it starts never hold them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass, field

from rig import envnumbers
from rig.errors import RigError

LISTEN_FD_ENV = "RIG_LISTEN_FD"
READY_FD_ENV = "RIG_READY_FD"
LISTEN_FD = envnumbers.Number(LISTEN_FD_ENV, low=0, whole=True, hint="start this service with `rig serve`")
READY_FD = envnumbers.Number(READY_FD_ENV, low=0, whole=True, hint="start this service with `rig serve`")
READY = b"ready\n"
BACKLOG = 128


@dataclass
class Held:
    """The sockets the supervisor keeps for one service."""

    listener: socket.socket
    blockers: list[socket.socket] = field(default_factory=list)

    @property
    def inode(self) -> int:
        """The listening socket's inode, as /proc/net/tcp names it."""
        return os.fstat(self.listener.fileno()).st_ino

    def close(self) -> None:
        for sock in (self.listener, *self.blockers):
            sock.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def hold(host: str, port: int) -> Held:
    """Listen on (host, port); a RigError in one line when another program has it already."""
    listener = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        # Another start's connections in TIME_WAIT must not block this bind; reuse never lets a
        # second socket bind next to one that listens.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(BACKLOG)
    except OSError as e:
        listener.close()
        raise _taken(host, port, e) from None
    held = Held(listener)
    if listener.family == socket.AF_INET:
        try:
            blocker = block_ipv6(port)
        except RigError:
            held.close()
            raise
        held.blockers += [blocker] if blocker else []
    return held


def block_ipv6(port: int) -> socket.socket | None:
    """Bind `port` on every IPv6 address (IPV6_V6ONLY), never listening: for a service that listens
    on IPv4 only (sshd, and the held ports), so nobody else can listen on the port over IPv6. None
    where there is no IPv6, or the port is privileged (only a root supervisor needs it there)."""
    try:
        blocker = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:  # a kernel without IPv6
        return None
    try:
        blocker.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        blocker.bind(("::", port))
    except OSError as e:
        blocker.close()
        if e.errno == errno.EADDRINUSE:
            raise _taken("::", port, e) from None
        return None
    return blocker


def _taken(host: str, port: int, e: OSError) -> RigError:
    return RigError(
        f"cannot listen on {host} port {port} ({e.strerror}): another program in the container has "
        "it; rig serve holds its services' ports itself, so stop that program first"
    )


@dataclass(frozen=True)
class Handed:
    """What one start of the service gets, and the supervisor's end of its ready pipe."""

    env: dict[str, str]
    fds: tuple[int, ...]  # to pass to the child (their numbers are in env)
    ready_read: int  # non-blocking
    ready_write: int  # the child's; the supervisor closes its copy once the child runs


def hand_over(held: Held) -> Handed:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    fd = held.listener.fileno()
    env = {LISTEN_FD_ENV: str(fd), READY_FD_ENV: str(write_end)}
    return Handed(env, (fd, write_end), read_end, write_end)


def is_ready(read_end: int) -> bool:
    """Whether the service has said it serves (a line on its ready pipe)."""
    try:
        return os.read(read_end, 64).startswith(READY)
    except BlockingIOError:
        return False


# ---- the service's side ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Taken:
    listener: socket.socket
    ready_fd: int

    def ready(self) -> None:
        """Say "serving" once; the pipe is closed after."""
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, READY)
        with contextlib.suppress(OSError):
            os.close(self.ready_fd)


def take(environ: MutableMapping[str, str] | None = None) -> Taken:
    """The socket and ready pipe `rig serve` handed this process; the variables are removed (the
    process's children must not look for descriptors they do not have)."""
    env = os.environ if environ is None else environ
    if LISTEN_FD_ENV not in env or READY_FD_ENV not in env:
        raise RigError(f"no {LISTEN_FD_ENV}/{READY_FD_ENV}: start this service with `rig serve`")
    listen_fd, ready_fd = LISTEN_FD.read_int(env), READY_FD.read_int(env)
    del env[LISTEN_FD_ENV], env[READY_FD_ENV]
    os.set_inheritable(ready_fd, False)
    listener = socket.socket(fileno=listen_fd)
    listener.set_inheritable(False)
    if listener.type != socket.SOCK_STREAM:
        raise RigError(f"{LISTEN_FD_ENV}={listen_fd} is not a listening TCP socket")
    return Taken(listener, ready_fd)
