"""Fixtures shared by the suite: rig's log lines reach caplog; the built image and its containers.

Helpers live in tests/helpers/; wait_until, free_port, Containers and IMAGE are importable from
here too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.containers import IMAGE, Containers, free_port
from tests.helpers.waiting import wait_until

__all__ = ["IMAGE", "Containers", "free_port", "wait_until"]

DOCKER_TIMEOUT_S = 900


@pytest.fixture(autouse=True)
def _rig_log_propagates() -> Iterator[None]:
    """log.setup() binds the stderr of the moment once per process and stops propagation (in the
    image, rig's lines must not be printed twice); in tests each one starts over and propagates,
    so capsys sees a fresh stderr and caplog sees every record."""
    logger = logging.getLogger("rig")
    logger.handlers.clear()
    logger.propagate = True
    yield
    logger.handlers.clear()
    logger.propagate = True


@pytest.fixture(scope="session")
def docker_client() -> Any:
    docker = pytest.importorskip("docker")
    # A busy 2-core host took 65 s to send the first byte of `docker save` for the 6 GB image,
    # past the SDK's 60 s default: every call may wait as long as a slow engine needs.
    client = docker.from_env(timeout=DOCKER_TIMEOUT_S)
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


@pytest.fixture
def containers(docker_client: Any, image: str) -> Iterator[Containers]:
    c = Containers(docker_client, image)
    try:
        yield c
    finally:
        c.cleanup()
