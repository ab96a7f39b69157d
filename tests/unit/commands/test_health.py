"""`rig health`: the healthcheck reads the supervisor's state file and the listening ports."""

from __future__ import annotations

import json
from pathlib import Path


def test_health_reports_what_is_wrong(tmp_path: Path) -> None:

    from rig.commands import health

    state = tmp_path / "services.json"
    assert health.check(state) == [f"no service state in {state}: is `rig serve` running?"]
    state.write_text(
        json.dumps(
            {
                "sshd": {"state": "backoff", "pid": None, "port": 2222, "failures": 1},
                "jupyter": {"state": "running", "pid": 9, "port": 1, "failures": 0},  # nothing listens on 1
            }
        )
    )
    assert health.check(state) == ["sshd is backoff", "jupyter does not listen on port 1"]
