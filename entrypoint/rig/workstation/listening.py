"""Who listens on a port, read from /proc: the probe of the supervisor and of `rig health`, which
runs every 10 s and so imports this alone.

Connecting would tell that something answers, not what: any process of the container may bind a
free port, so a service's port is its own only when the listening socket is the one the service
holds. /proc/net/tcp{,6} names each listening socket by inode and by the uid that made it, and
/proc/PID/fd links each descriptor of a process to its socket's inode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"  # /proc/net/tcp's state of a listening socket


@dataclass(frozen=True)
class Listener:
    address: str  # hex, as /proc/net/tcp writes it
    uid: int  # who made the socket
    inode: int


def listeners(port: int, proc_root: Path = Path("/proc")) -> list[Listener]:
    """Every TCP socket listening on `port`, IPv4 and IPv6."""
    found = []
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc_root / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            fields = row.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port:
                found.append(Listener(address, int(fields[7]), int(fields[9])))
    return found


def listening(port: int, proc_root: Path = Path("/proc")) -> bool:
    """Whether a TCP socket listens on `port`, whoever holds it.

    Connecting would do too, but sshd logs every probe connection as an aborted login.
    """
    return bool(listeners(port, proc_root))


def socket_inodes(pid: int, proc_root: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets process `pid` holds; empty when it is gone or not readable (a
    process of another user, without CAP_SYS_PTRACE, which Docker does not give root)."""
    fd_dir = proc_root / str(pid) / "fd"
    inodes = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return set()
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[8:-1]))
    return inodes


def held_by(port: int, pid: int, proc_root: Path = Path("/proc")) -> tuple[int, ...]:
    """The inodes of the sockets listening on `port` when process `pid` holds every one of them;
    empty while nothing listens there or another process holds any of them (the port is taken)."""
    found = listeners(port, proc_root)
    if not found:
        return ()
    own = socket_inodes(pid, proc_root)
    inodes = tuple(sorted({entry.inode for entry in found}))
    return inodes if own.issuperset(inodes) else ()
