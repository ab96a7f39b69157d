"""Names for what the tests create in Docker (containers, volumes, networks, compose projects): each
carries this run's id, `rig-test-RUN-...`, so the end of the run (tests/conftest.py) finds what a test
left behind without touching what another run on the same engine has now."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

RUN_ENV = "RIGTEST_RUN"  # set by a run's first process (xdist's controller); its workers inherit it
PREFIX = "rig-test"


def run_id() -> str:
    """This run's id, made the first time it is asked for."""
    return os.environ.setdefault(RUN_ENV, uuid.uuid4().hex[:6])


def unique(kind: str = "") -> str:
    """A fresh name in this run: rig-test-RUN-KIND-HEX (KIND without a leading rig-test)."""
    kind = kind.removeprefix(PREFIX).strip("-")
    return "-".join(part for part in (PREFIX, run_id(), kind, uuid.uuid4().hex[:8]) if part)


def left_behind(run: str) -> list[str]:
    """What the run `run` created in Docker and has not removed: 'container NAME', 'volume NAME' and
    'network NAME'; nothing without a docker CLI."""
    if shutil.which("docker") is None:
        return []
    found = []
    mine = f"{PREFIX}-{run}-"
    for kind, argv in (
        ("container", ["docker", "ps", "--all", "--format", "{{.Names}}"]),
        ("volume", ["docker", "volume", "ls", "--format", "{{.Name}}"]),
        ("network", ["docker", "network", "ls", "--format", "{{.Name}}"]),
    ):
        listed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        found += [f"{kind} {name}" for name in sorted(listed.stdout.split()) if name.startswith(mine)]
    return found
