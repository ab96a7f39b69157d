"""`rig health`: the container's healthcheck. Healthy when every supervised service is RUNNING and
the sockets listening on its port are the ones the supervisor saw it listen on (services.json names
their inodes): a port another process holds is unhealthy. One line either way, exit 0 or 1 (Docker's
HEALTHCHECK contract). A container whose PID 1 runs another command (`docker run IMAGE rig train`)
serves nothing: healthy, so an orchestrator that acts on health never stops a training job. It runs
as `nobody`, so it reads only services.json, /proc/1/cmdline and /proc/net/tcp{,6}."""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rig import paths
from rig.workstation.listening import listeners

STATE_FILE = paths.SERVICES_STATE


def serves(cmdline: Sequence[str]) -> bool:
    """Whether a command line (PID 1's: tini -- rig exec -- CMD) runs `rig serve`."""
    return any(os.path.basename(a) == "rig" and b == "serve" for a, b in itertools.pairwise(cmdline))


def first_command(proc_root: Path = Path("/proc")) -> list[str] | None:
    """PID 1's command line; None where it cannot be read (then the services are checked)."""
    try:
        raw = (proc_root / "1/cmdline").read_bytes()[:65536]
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def check(state_file: Path = STATE_FILE, proc_root: Path = Path("/proc")) -> list[str]:
    """What is wrong; empty when healthy."""
    return verdict(state_file, proc_root)[0]


def verdict(state_file: Path = STATE_FILE, proc_root: Path = Path("/proc")) -> tuple[list[str], bool]:
    """What is wrong (empty when healthy), and whether the container serves nothing to check."""
    try:
        services: dict[str, dict[str, Any]] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        command = first_command(proc_root)
        if command and not serves(command):
            return [], True  # no `rig serve` here (a job's container): nothing to check
        return [f"no service state in {state_file}: is `rig serve` running?"], False
    problems = []
    for name, info in services.items():
        if info.get("state") != "running":
            problems.append(f"{name} is {info.get('state')}")
            continue
        port = int(info["port"])
        found = listeners(port, proc_root)
        own = {int(i) for i in info.get("inodes", ())}
        others = sorted({entry.inode for entry in found} - own)
        if others:
            held = ", ".join(map(str, others))
            problems.append(f"port {port} of {name} is held by another process (socket inode {held})")
        elif not found:
            problems.append(f"{name} does not listen on port {port}")
    return problems, False


def cmd_health(args: argparse.Namespace) -> int:
    problems, idle = verdict()
    print(
        "unhealthy: " + "; ".join(problems)
        if problems
        else "healthy" + (": no services here" if idle else "")
    )
    return 1 if problems else 0


def register(sub: Any) -> None:
    p = sub.add_parser("health", help="exit 0 when every service of `rig serve` answers (the healthcheck)")
    p.set_defaults(func=cmd_health)
