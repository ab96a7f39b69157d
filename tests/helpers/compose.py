"""A compose project a test started, taken down with everything it made."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from tests.helpers import REPO


def take_down(project: str, *files: str, env: Mapping[str, str] | None = None, stop_s: int = 10) -> None:
    """The project's containers, volumes and network gone. compose's `down` leaves a one-off
    container that still runs (`compose run`, a `make train` cut short by a test's timeout), and with
    it the volumes it mounts and the network; with --remove-orphans it removes that container but may
    try the volumes before it is gone. So: `down`, then whatever of the project is left (found by its
    label) removed, then `down` again. files: `-f FILE` pairs (compose.yaml when none); env: the
    variables the files need to be read."""
    argv = ["docker", "compose", "-p", project, *(files or ("-f", str(REPO / "compose.yaml")))]
    down = [*argv, "down", "--volumes", "--remove-orphans", "-t", str(stop_s)]
    environ = {**os.environ, **(env or {})}
    subprocess.run(down, cwd=REPO, env=environ, capture_output=True, timeout=180, check=False)
    label = f"label=com.docker.compose.project={project}"
    containers = _listed(["docker", "ps", "--all", "--quiet", "--filter", label])
    if containers:
        rm = ["docker", "rm", "--force", "--volumes", *containers]
        subprocess.run(rm, capture_output=True, timeout=180, check=False)
    others = [_listed(["docker", kind, "ls", "--quiet", "--filter", label]) for kind in ("volume", "network")]
    if containers or any(others):
        subprocess.run(down, cwd=REPO, env=environ, capture_output=True, timeout=180, check=False)


def _listed(argv: list[str]) -> list[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stdout.split()
