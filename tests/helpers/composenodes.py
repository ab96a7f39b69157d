"""Two containers of the image as two nodes of one job: a compose project on its own network, each
node a service named node<rank> with NNODES/NODE_RANK/MASTER_ADDR/MASTER_PORT, run to the end with
`docker compose up` (the user's tool), its logs and exit codes read, and always taken down with its
volumes (tests/helpers/compose.py take_down)."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.compose import take_down
from tests.helpers.containers import IMAGE
from tests.helpers.names import unique

# compose 2.26 clears lines even with --ansi never
_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class NodesRun:
    up: subprocess.CompletedProcess[str]  # `docker compose up`: its exit code and output
    logs: dict[str, str]  # each node's log, by service name
    states: list[tuple[str, str]]  # (service, exit code), sorted

    @property
    def all_logs(self) -> str:
        """Every node's log, node 0's first."""
        return "".join(self.logs[name] for name in sorted(self.logs))


def nodes(service: dict[str, Any], port: int, count: int = 2, **per_node: dict[str, Any]) -> dict[str, Any]:
    """count services node0, node1... of the image, each `service` with its node's rendezvous
    variables (master node0:port) added to its environment; per_node: more for one of them
    (node1={...}), its environment added to the rest."""
    out: dict[str, Any] = {}
    for rank in range(count):
        name = f"node{rank}"
        extra = per_node.get(name, {})
        env = {
            **service.get("environment", {}),
            "NNODES": str(count),
            "NODE_RANK": str(rank),
            "MASTER_ADDR": "node0",
            "MASTER_PORT": str(port),
            **extra.get("environment", {}),
        }
        out[name] = {"image": IMAGE, "pull_policy": "never", **service, **extra, "environment": env}
    return out


def run(services: dict[str, Any], tmp_path: Path, *, kind: str, timeout: int) -> NodesRun:
    """`docker compose up` of these services until they exit, then their logs and exit codes; the
    project (named for this test run, `kind` in its name) is taken down whatever happens."""
    compose_file = tmp_path / "compose.nodes.yaml"
    compose_file.write_text(json.dumps({"services": services}))  # JSON is YAML
    project = unique(kind)
    compose = ["docker", "compose", "--ansi", "never", "-f", str(compose_file), "-p", project]

    def read(*args: str) -> str:
        return _ESCAPES.sub(
            "", subprocess.run([*compose, *args], capture_output=True, text=True, timeout=60).stdout
        )

    try:
        up = subprocess.run([*compose, "up", "--no-color"], capture_output=True, text=True, timeout=timeout)
        logs = {name: read("logs", "--no-color", "--no-log-prefix", name) for name in services}
        states = read("ps", "-a", "--format", "{{.Service}} {{.ExitCode}}").split()
    finally:
        take_down(project, "-f", str(compose_file))
    return NodesRun(up, logs, sorted(zip(states[::2], states[1::2], strict=True)))
