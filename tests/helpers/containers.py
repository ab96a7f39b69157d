"""Containers from the image under test, always removed; a free host port for each published one."""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from tests.helpers.names import unique

IMAGE = os.environ.get("IMAGE", "yolo-rig:cu121")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Containers:
    """Starts containers from the image and removes every one of them at teardown."""

    def __init__(self, client: Any, image: str) -> None:
        self.client = client
        self.image = image
        self.started: list[Any] = []

    def run(self, command: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("detach", True)
        kwargs.setdefault("name", unique())
        container = self.client.containers.run(self.image, command, **kwargs)
        self.started.append(container)
        return container

    def exec(
        self, container: Any, cmd: str | list[str], timeout: int = 120, **kwargs: Any
    ) -> tuple[int, str]:
        """Run a command inside a running container, bounded by coreutils timeout."""
        argv = ["timeout", str(timeout), *(["bash", "-c", cmd] if isinstance(cmd, str) else cmd)]
        result = container.exec_run(argv, demux=False, **kwargs)
        return int(result.exit_code), result.output.decode(errors="replace")

    def oneshot(self, command: Any, timeout: int = 600, **kwargs: Any) -> tuple[int, str]:
        """Run a container to completion and return (exit code, combined output)."""
        container = self.run(command, **kwargs)
        try:
            status = container.wait(timeout=timeout)
        except Exception:
            container.kill()
            raise
        logs = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return int(status["StatusCode"]), logs

    def cleanup(self) -> None:
        for container in self.started:
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)
