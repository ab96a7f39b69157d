"""Fixtures shared by the suite: the built image, containers that are always removed, waiting."""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

IMAGE = os.environ.get("IMAGE", "yolo-rig:cu121")


def wait_until(condition: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    """Poll until condition() is truthy; return its value or fail the test with the last error."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # the condition may fail until the service is up
            last_error = e
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s (last error: {last_error!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def docker_client() -> Any:
    docker = pytest.importorskip("docker")
    client = docker.from_env()
    try:
        client.ping()
    except Exception as e:
        pytest.fail(f"no Docker engine: {e}")
    return client


@pytest.fixture(scope="session")
def image(docker_client: Any) -> str:
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.fail(f"image {IMAGE} is not built; run `make build`")
    return IMAGE


class Containers:
    """Starts containers from the image and removes every one of them at teardown."""

    def __init__(self, client: Any, image: str) -> None:
        self.client = client
        self.image = image
        self.started: list[Any] = []

    def run(self, command: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("detach", True)
        kwargs.setdefault("name", f"rig-test-{uuid.uuid4().hex[:10]}")
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


@pytest.fixture
def containers(docker_client: Any, image: str) -> Iterator[Containers]:
    c = Containers(docker_client, image)
    try:
        yield c
    finally:
        c.cleanup()
