"""The cluster tests' fixtures: the running local Slurm cluster (`make test-cluster` starts it) and
the jobs a test submits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.slurm import Cluster
from tests.helpers.waiting import wait_until


@pytest.fixture(scope="module")
def cluster(docker_client: Any) -> Cluster:
    """The cluster once both nodes are idle (a module before may have left a job ending)."""
    c = Cluster(docker_client)
    wait_until(lambda: c.run("sinfo -h -o '%D %t' | grep -qx '2 idle'")[0] == 0, timeout=300, interval=2)
    return c


@pytest.fixture
def jobs(cluster: Cluster) -> Iterator[list[str]]:
    """Job ids a test submitted: cancelled at teardown, so a failed test leaves the nodes idle."""
    submitted: list[str] = []
    yield submitted
    for job_id in submitted:
        cluster.run(f"scancel {job_id}")
    if submitted:
        wait_until(lambda: cluster.run("squeue -h")[1].strip() == "", timeout=180, interval=2)
