"""rig.workstation.listening: who listens on a port, from /proc/net/tcp{,6} and /proc/PID/fd (fake)."""

from __future__ import annotations

import os
from pathlib import Path

from rig.workstation.listening import Listener, held_by, listeners, listening

from tests.helpers.fakenet import ESTABLISHED, HEADER, LISTEN
from tests.helpers.fakenet import tcp_row as _row


def _fake_proc(root: Path, tcp: list[str], tcp6: list[str], fds: dict[int, list[str]]) -> Path:
    (root / "net").mkdir(parents=True)
    (root / "net/tcp").write_text(HEADER + "".join(tcp))
    (root / "net/tcp6").write_text(HEADER + "".join(tcp6))
    for pid, targets in fds.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        for n, target in enumerate(targets):
            os.symlink(target, root / str(pid) / "fd" / str(n))
    return root


def test_listeners_name_each_listening_socket_by_uid_and_inode(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        [
            _row("00000000:08AE", LISTEN, 0, 501),  # 2222 LISTEN, root's
            _row("0100007F:22B8", ESTABLISHED, 1000, 502),  # 8888 ESTABLISHED only
            _row("0100007F:1776", LISTEN, 1000, 503),  # 6006 LISTEN, yolo's
        ],
        [_row("00000000000000000000000000000000:08AE", LISTEN, 0, 504)],
        {},
    )
    assert listeners(2222, proc) == [Listener("00000000", 0, 501), Listener("0" * 32, 0, 504)]
    assert listeners(6006, proc) == [Listener("0100007F", 1000, 503)]
    assert listening(2222, proc) and listening(6006, proc)
    assert not listening(8888, proc)
    assert not listening(2222, tmp_path / "missing")


def test_a_port_is_held_by_a_process_only_when_it_holds_every_listener(tmp_path: Path) -> None:
    proc = _fake_proc(
        tmp_path,
        [_row("00000000:08AE", LISTEN, 0, 501), _row("0100007F:22B8", LISTEN, 1000, 601)],
        [_row("00000000000000000000000000000000:08AE", LISTEN, 0, 502)],
        {
            19: ["/dev/null", "socket:[501]", "socket:[502]", "pipe:[9]"],  # sshd: both of 2222's
            30: ["socket:[601]"],  # a session's squatter on 8888
            21: ["socket:[777]"],  # JupyterLab with some other socket
        },
    )
    assert held_by(2222, 19, proc) == (501, 502)
    assert held_by(8888, 21, proc) == ()  # someone else listens there
    assert held_by(8888, 30, proc) == (601,)
    assert held_by(6006, 21, proc) == ()  # nothing listens
    assert held_by(2222, 404, proc) == ()  # no such process (or unreadable)
