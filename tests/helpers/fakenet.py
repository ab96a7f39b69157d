"""/proc/net/tcp{,6} rows for a fake /proc: who listens on which port."""

from __future__ import annotations

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
LISTEN, ESTABLISHED = "0A", "01"


def tcp_row(address: str, state: str, uid: int, inode: int) -> str:
    """One socket: address as HEXIP:HEXPORT, the uid that made it, its inode."""
    timers = "00000000:00000000 00:00000000 00000000"
    return f"   0: {address} 00000000:0000 {state} {timers} {uid:5} 0 {inode} 1 0\n"
