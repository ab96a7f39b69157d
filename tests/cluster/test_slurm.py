"""The local Slurm cluster itself (`make test-cluster`): its MUNGE key. What deploy/slurm.sbatch does on
it is tested beside: jobs and their run directories (test_slurm_jobs.py), stops, time limits and
requeues (test_slurm_stop.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.slurm import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_the_munge_key_is_made_at_start_never_baked(cluster: Cluster, docker_client: Any) -> None:
    """The image holds no MUNGE key (Debian's postinst makes one: removed in the same layer); the
    running cluster's is the one cluster-up made, readable by munge alone."""
    image = cluster.container("controller").image
    out = docker_client.containers.run(
        image, entrypoint=["bash", "-c", "ls -A /etc/munge"], remove=True, stderr=True
    ).decode()
    assert out.strip() == "", out
    for service in ("controller", "node0", "node1"):
        mode = cluster.check("stat -c '%U %a' /etc/munge/munge.key", service=service, user="root")
        assert mode.strip() == "munge 400", (service, mode)
