"""Fixtures shared by the suite: rig's log lines reach caplog; the built image and its containers.

Helpers live in tests/helpers/; wait_until, free_port, Containers and IMAGE are importable from
here too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import names
from tests.helpers.containers import IMAGE, Containers, free_port
from tests.helpers.waiting import wait_until

__all__ = ["IMAGE", "Containers", "free_port", "wait_until"]

DOCKER_TIMEOUT_S = 900

# The test files that take longest under `make test`, slowest first (seconds on the 2-core CI box,
# 2026-12-03). make test hands whole files to its workers (pytest-xdist, --dist loadfile) in
# collection order: started first, a long file cannot end up running alone at the end. A file not
# listed comes after these, in its usual order.
SLOWEST_FILES = (
    "image/test_release.py",  # 372
    "image/test_resumes.py",  # 320 (on a busy box)
    "image/test_gpu_rehearsal.py",  # 150
    "image/test_image.py",  # 187
    "image/test_hostile_user.py",  # 187
    "image/test_speed.py",  # 161
    "image/test_yolo_image.py",  # 159
    "image/test_ultralytics_image.py",  # 143
    "image/test_cpu_ranks_image.py",  # 142
    "image/test_serve_stop.py",  # 136
    "image/test_serve_hardening.py",  # 125 (94, and the token probe's 30 s since)
    "image/test_stops.py",  # 123
    "image/test_imagecache.py",  # 115
    "image/test_pytorchjob.py",  # 104
    "image/test_apptainer.py",  # 98 (2026-12-06, other suites on the box)
    "image/test_ultralytics_peer.py",  # 95
    "image/test_multigpu.py",  # 93
    "image/test_metrics_image.py",  # 85
    "image/test_launch_image.py",  # 79
    "image/test_hostile_inputs.py",  # 77
    "image/test_device_augment.py",  # 74
    "image/test_long_runs.py",  # 72
)
TESTS = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "ultralytics_window: the image with another Ultralytics release (`make test-ultralytics V=X`)",
    )
    names.run_id()  # before xdist starts its workers: they inherit the run's id


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails where its tests left a container, volume or network behind: each test takes down
    what it starts (a compose project with its volumes). Only this run's are looked at (their names
    carry its id: tests/helpers/names.py); in xdist's controller, once every worker is done."""
    if hasattr(session.config, "workerinput"):
        return
    left = names.left_behind(names.run_id())
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"ERROR tests: this run's tests left {len(left)} behind in Docker:", *(f"  {x}" for x in left)]
    if reporter is not None:
        reporter.write("\n")  # after the progress line, which xdist's reporter leaves open
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}

    def place(item: pytest.Item) -> int:
        inside = item.path.is_relative_to(TESTS)
        return rank.get(item.path.relative_to(TESTS).as_posix(), len(rank)) if inside else len(rank)

    items.sort(key=place)  # a stable sort: the tests of a file keep their order


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


@pytest.fixture(autouse=True)
def _no_state_reaches_the_next_test() -> Iterator[None]:
    """A worker (make test runs two, pytest-xdist) runs many test files in one process, one after
    another: what a test leaves in the process's environment or working folder would reach every test
    after it. The test that leaves it fails, and the next starts from what it found (monkeypatch's
    changes are undone before this looks; tests/unit/test_isolation.py shows it)."""
    environ, cwd = dict(os.environ), os.getcwd()
    yield
    keys = (environ.keys() | os.environ.keys()) - {"PYTEST_CURRENT_TEST"}  # pytest's own, per test
    changed = sorted(k for k in keys if environ.get(k) != os.environ.get(k))
    moved = os.getcwd() != cwd
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    assert not changed, f"the test left the environment changed ({', '.join(changed)}): use monkeypatch"
    assert not moved, "the test left the working folder elsewhere: use monkeypatch.chdir"


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
