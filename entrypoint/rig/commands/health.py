"""`rig health`: the container's healthcheck. Healthy when every supervised service is RUNNING and
the sockets listening on its port are the ones the supervisor saw it listen on (services.json names
their inodes): a port another process holds is unhealthy. One line either way, exit 0 or 1 (Docker's
HEALTHCHECK contract). It runs as `nobody`, so it reads only services.json and /proc/net/tcp{,6}."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rig import paths
from rig.workstation.listening import listeners

STATE_FILE = paths.SERVICES_STATE


def check(state_file: Path = STATE_FILE, proc_root: Path = Path("/proc")) -> list[str]:
    """What is wrong; empty when healthy."""
    try:
        services: dict[str, dict[str, Any]] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return [f"no service state in {state_file}: is `rig serve` running?"]
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
    return problems


def cmd_health(args: argparse.Namespace) -> int:
    problems = check()
    print("unhealthy: " + "; ".join(problems) if problems else "healthy")
    return 1 if problems else 0


def register(sub: Any) -> None:
    p = sub.add_parser("health", help="exit 0 when every service of `rig serve` answers (the healthcheck)")
    p.set_defaults(func=cmd_health)
