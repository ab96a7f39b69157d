"""The repository's deploy/slurm.sbatch, unmodified, on the local Slurm cluster (`make test-cluster`):
two nodes x one CPU rank (gloo) train with the same image, path and trainer as GPU ranks, and each
way a job is stopped or lost does what docs/training.md says ("Stops, time limits, requeues and
preemption under Slurm").

Tiny runs: the demo dataset of cluster-up (32 images), imgsz 64, a total batch of 2 (16 batches an
epoch: the ranks agree on a stop every 10 batches, so every stop in the first four epochs is mid-epoch).
"""

from __future__ import annotations

import json
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
    """RANK and WORLD_SIZE of the trainer processes running on a node, read from /proc as the job's
    user (root in the container may not read another user's environ)."""
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


def last_pt(cluster: Cluster, job_id: str) -> dict[str, Any]:
    """What the run's last.pt says: its epoch, whether a stop saved it, and its mtime."""
    script = (
        "import json, os, sys, torch; p = sys.argv[1]; "
        "c = torch.load(p, map_location='cpu', weights_only=False); "
        "m = c.get('train_metrics') or {}; "
        "print(json.dumps({'epoch': c.get('epoch'), 'stopped': bool(m.get('rig/stopped_mid_epoch')), "
        "'mtime': os.stat(p).st_mtime}))"
    )
    out = cluster.check(f'python -c "{script}" {run_dir(job_id)}/weights/last.pt', timeout=300)
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_scancel_signal_term_keeps_the_epoch(cluster: Cluster, jobs: list[str]) -> None:
    """`scancel --signal=TERM JOBID` reaches the ranks, not srun: they stop between batches and
    rank 0 writes last.pt after the signal; no task is killed."""
    job_id = cluster.submit(train_args(3))
    jobs.append(job_id)
    wait_training(cluster, job_id)
    sent = float(cluster.check("date +%s.%N"))
    cluster.check(f"scancel --signal=TERM {job_id}")
    job = cluster.wait_job(job_id, ENDED, RUN_TIMEOUT)
    out = cluster.output(job_id)
    assert "stop requested" in out, out[-4000:]
    assert "Killed" not in out and "forcing job termination" not in out, out[-4000:]
    # Every rank ran its stop: 128 + SIGTERM, the batch script passes srun's code on.
    assert job.fields.get("ExitCode") == "143:0", (job.fields, out[-4000:])
    state = last_pt(cluster, job_id)
    assert state["stopped"], state
    assert state["mtime"] > sent, (state, sent)


def test_two_nodes_train_and_the_time_limit_warning_requeues(cluster: Cluster, jobs: list[str]) -> None:
    """Two nodes x one CPU rank train with world 2 and global rank 0 on node0. The time-limit
    warning (USR1 to the batch script) stops the ranks with last.pt and requeues the job; the
    requeued job resumes (resume=auto, the same run name) and finishes: each epoch trained once.
    One job for both, to keep CI short."""
    epochs = 2
    job_id = cluster.submit(train_args(epochs))
    jobs.append(job_id)
    wait_training(cluster, job_id)
    assert trainer_ranks(cluster, "node0") == {"RANK=0", "WORLD_SIZE=2"}
    assert trainer_ranks(cluster, "node1") == {"RANK=1", "WORLD_SIZE=2"}
    wait_until(lambda: cluster.results_epochs(run_dir(job_id)) == [1], timeout=RUN_TIMEOUT, interval=1)
    cluster.check(f"scancel --signal=USR1 --batch {job_id}")
    wait_until(
        lambda: cluster.job(job_id).restarts == 1 or cluster.job(job_id).state in ENDED,
        timeout=RUN_TIMEOUT,
        interval=1,
    )
    job = cluster.wait_job(job_id, ENDED, RUN_TIMEOUT)
    out = cluster.output(job_id)
    assert job.state == "COMPLETED", out[-4000:]
    assert job.restarts == 1
    # Each node logs the world once per start: two starts.
    assert out.count("world: 2 ranks = 2 nodes x 1 rank per node (cpu, gloo)") == 4, out[-4000:]
    assert "requeueing job" in out and "stop requested" in out, out[-4000:]
    assert "Killed" not in out, out[-4000:]
    assert cluster.results_epochs(run_dir(job_id)) == list(range(1, epochs + 1)), out[-4000:]


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
