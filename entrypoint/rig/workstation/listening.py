"""Whether a port listens, read from /proc: the probe of the supervisor and of `rig health`, which
runs every 10 s and so imports this alone."""

from pathlib import Path


def listening(port: int, proc_root: Path = Path("/proc")) -> bool:
    """Whether a TCP socket listens on `port`, read from /proc/net/tcp{,6}.

    Connecting would do too, but sshd logs every probe connection as an aborted login.
    """
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc_root / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN.
            if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False
