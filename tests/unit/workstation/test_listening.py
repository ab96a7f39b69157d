"""rig.workstation.listening: a port listens when /proc/net/tcp{,6} says LISTEN for it (a fake /proc)."""

from __future__ import annotations

from pathlib import Path

from rig.workstation.listening import listening


def test_listening_reads_proc_net_tcp(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue\n"
    (tmp_path / "net/tcp").write_text(
        header
        + "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000\n"  # 2222 LISTEN
        + "   1: 0100007F:22B8 0100007F:A1B2 01 00000000:00000000\n"  # 8888 ESTABLISHED only
    )
    (tmp_path / "net/tcp6").write_text(header + "   0: 00000000000000000000000000000000:1776 0:0 0A 0:0\n")
    assert listening(2222, tmp_path)
    assert not listening(8888, tmp_path)
    assert listening(6006, tmp_path)
    assert not listening(2222, tmp_path / "missing")
