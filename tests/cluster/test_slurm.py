"""The repository's deploy/slurm.sbatch, unmodified, on the local Slurm cluster (`make test-cluster`):
two nodes x one CPU rank (gloo) train with the same image, path and trainer as GPU ranks, and a job
that loses a node ends as docs/training.md says ("Stops, time limits, requeues and preemption under
Slurm"); the stops are test_slurm_stop.py's.

Tiny runs: the demo dataset of cluster-up (32 images), imgsz 64, a total batch of 2 (16 batches an
epoch: the ranks agree on a stop every 10 batches, so every stop in the first four epochs is mid-epoch).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.slurm import DATA, PROJECT_DIR, RUNS, Cluster
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Generous: two ranks share a busy 2-core host with the cluster's daemons.
RUN_TIMEOUT = 900
TRAINER = "rig.launch.trainer"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def train_args(epochs: int) -> str:
    return (
        f"device=cpu --cpu-ranks 1 data={DATA} model=yolo11n.yaml epochs={epochs} imgsz=64 batch=2 "
        f"project={PROJECT_DIR} resume=auto plots=False"
    )


def run_dir(job_id: str) -> str:
    return f"{RUNS}/train-slurm-{job_id}"


@pytest.fixture(scope="module")
def cluster(docker_client: Any) -> Cluster:
    c = Cluster(docker_client)
    c.check("sinfo -h -o '%D %t' | grep -qx '2 idle'", timeout=60)
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


def trainer_ranks(cluster: Cluster, service: str) -> set[str]:
    """RANK and WORLD_SIZE of the trainer processes running on a node, read from /proc as yolo, the
    job's user (root in the container may not read another user's environ)."""
    cmd = (
        f"for p in $(pgrep -f -- '^\\S*python\\S*( -\\S+)* -m {TRAINER} '); do "
        "tr '\\0' '\\n' </proc/$p/environ 2>/dev/null | grep -E '^(RANK|WORLD_SIZE)='; done | sort -u"
    )
    _, out = cluster.run(cmd, service=service)
    return {token for token in out.split() if token.startswith(("RANK=", "WORLD_SIZE="))}


def wait_training(cluster: Cluster, job_id: str) -> None:
    """Until both nodes run a trainer rank of the job and the first epoch has begun (the ranks'
    stop handlers are in place)."""
    wait_until(
        lambda: (
            "Starting training for" in cluster.output(job_id)
            and trainer_ranks(cluster, "node0")
            and trainer_ranks(cluster, "node1")
        ),
        timeout=RUN_TIMEOUT,
        interval=1,
    )


def test_a_lost_node_ends_the_run(cluster: Cluster, jobs: list[str]) -> None:
    """A compute node killed mid-run: Slurm marks it DOWN after SlurmdTimeout (30 s) and ends the
    job's run on the other node (KillWait, 60 s, at most); never a hang. The node comes back."""
    job_id = cluster.submit(train_args(4))
    jobs.append(job_id)
    wait_training(cluster, job_id)
    node1 = cluster.container("node1")
    start = time.monotonic()
    node1.kill()
    try:
        # The job leaves RUNNING (requeued: --requeue; it waits for two nodes again) ...
        wait_until(lambda: cluster.job(job_id).state != "RUNNING", timeout=240, interval=1)
        # ... and nothing of it is left on node0.
        wait_until(lambda: not trainer_ranks(cluster, "node0"), timeout=240, interval=1)
        ended = time.monotonic() - start
        job = cluster.job(job_id)
        print(
            f"INFO test: node1 killed; the run ended on node0 after {ended:.0f} s "
            f"({job.state}, {job.fields.get('Reason')})"
        )
        print("\n".join(cluster.output(job_id).splitlines()[-12:]))
    finally:
        node1.start()
        wait_until(
            lambda: cluster.run("sinfo -h -n node1 -o %t")[1].strip() in {"idle", "alloc", "mix"},
            timeout=180,
            interval=2,
        )


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
