"""`rig health`: the healthcheck reads the supervisor's state file and who listens on each port."""

from __future__ import annotations

import json
from pathlib import Path

from rig.commands import health

from tests.helpers.fakenet import HEADER, LISTEN
from tests.helpers.fakenet import tcp_row as _row


def test_health_reports_what_is_wrong(tmp_path: Path) -> None:
    state = tmp_path / "services.json"
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net/tcp").write_text(
        HEADER + _row("00000000:08AE", LISTEN, 0, 501) + _row("00000000:22B8", LISTEN, 1000, 999)
    )
    assert health.check(state, proc) == [f"no service state in {state}: is `rig serve` running?"]
    (proc / "1").mkdir()
    (proc / "1/cmdline").write_bytes(b"/usr/bin/tini\0--\0/opt/venv/bin/rig\0exec\0--\0rig\0serve\0")
    assert health.check(state, proc) == [f"no service state in {state}: is `rig serve` running?"]
    # A job's container (`docker run IMAGE rig train ...`) serves nothing: healthy, never stopped for it.
    (proc / "1/cmdline").write_bytes(b"/usr/bin/tini\0--\0/opt/venv/bin/rig\0exec\0--\0rig\0train\0serve\0")
    assert health.check(state, proc) == [] and health.verdict(state, proc) == ([], True)
    (proc / "1/cmdline").unlink()

    def services(**states: dict[str, object]) -> list[str]:
        state.write_text(json.dumps(states))
        return health.check(state, proc)

    sshd = {"state": "running", "pid": 19, "port": 2222, "inodes": [501], "failures": 0}
    assert services(sshd=sshd) == []
    assert services(sshd={**sshd, "state": "backoff", "inodes": []}) == ["sshd is backoff"]
    # JupyterLab's socket is 700; 999 is another process's, which took its port.
    jupyter = {"state": "running", "pid": 21, "port": 8888, "inodes": [700], "failures": 0}
    assert services(sshd=sshd, jupyter=jupyter) == [
        "port 8888 of jupyter is held by another process (socket inode 999)"
    ]
    assert services(jupyter={**jupyter, "port": 1}) == ["jupyter does not listen on port 1"]
