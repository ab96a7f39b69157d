"""`rig health`: the container's healthcheck. Healthy when every supervised service is RUNNING and
listens on its port; one line either way, exit 0 or 1 (Docker's HEALTHCHECK contract)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rig import paths
from rig.workstation.listening import listening

STATE_FILE = paths.SERVICES_STATE


def check(state_file: Path = STATE_FILE) -> list[str]:
    """What is wrong; empty when healthy."""
    try:
        services: dict[str, dict[str, Any]] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return [f"no service state in {state_file}: is `rig serve` running?"]
    problems = []
    for name, info in services.items():
        if info.get("state") != "running":
            problems.append(f"{name} is {info.get('state')}")
        elif not listening(int(info["port"])):
            problems.append(f"{name} does not listen on port {info['port']}")
    return problems


def cmd_health(args: argparse.Namespace) -> int:
    problems = check()
    print("unhealthy: " + "; ".join(problems) if problems else "healthy")
    return 1 if problems else 0


def register(sub: Any) -> None:
    p = sub.add_parser("health", help="exit 0 when every service of `rig serve` answers (the healthcheck)")
    p.set_defaults(func=cmd_health)
