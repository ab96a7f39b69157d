"""Stops under Slurm with the repository's sbatch, unmodified, on the local cluster: two nodes x one
CPU rank with its loader workers (two per rank: a GPU run's are as many as its CPUs), each stop
through its real path.

- `scancel --signal=TERM JOBID`: Slurm signals every process of the step (torchrun, the rank, its
  workers); the ranks save at a batch boundary inside the epoch and exit 143, nothing crashes.
- the time limit itself: Slurm's warning (--signal=B:USR1) reaches the batch script, which stops the
  ranks the same way and requeues the job within its budget; the requeued job continues inside the
  epoch and finishes, each epoch once. The shipped budget (180 s of warning) is scaled down for a
  short job here, the same way a user would: --signal on the command line and STOP_WARNING_S.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.helpers.slurm import DATA, USER, Cluster
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 900  # two ranks share a busy 2-core host with the cluster's daemons
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
# Each user's runs in a folder of their own on the shared runs volume, as the nodes and the submit
# host see it.
PROJECT_DIR = f"/workspace/runs/{USER}"
RUNS = f"/shared/runs/{USER}"


def train_args(epochs: int, name: str = "") -> str:
    # cluster-up's 32 demo images at batch 2 over 2 ranks: 16 batches an epoch per rank (the stop
    # checks come every 10, so a stop lands inside an epoch or its validation).
    return (
        f"device=cpu --cpu-ranks 1 workers=2 data={DATA} model=yolo11n.yaml epochs={epochs} imgsz=64 "
        f"batch=2 project={PROJECT_DIR} resume=auto plots=False" + (f" name={name}" if name else "")
    )


def run_dir(job_id: str) -> str:
    return f"{RUNS}/train-slurm-{job_id}"


def last_pt(cluster: Cluster, job_id: str, folder: str | None = None) -> dict[str, Any]:
    """Where the run's last.pt continues ([epoch, done, batches]) and when rig wrote it."""
    script = (
        "import json, sys, torch; c = torch.load(sys.argv[1], map_location='cpu', weights_only=False); "
        "r = c.get('rig_resume') or {}; w = [r.get('epoch'), r.get('done'), r.get('batches')]; "
        "print(json.dumps({'where': w, 'saved': r.get('saved')}))"
    )
    out = cluster.check(f'python -c "{script}" {folder or run_dir(job_id)}/weights/last.pt', timeout=300)
    return dict(json.loads(out.strip().splitlines()[-1]))


TRAINER = "rig.launch.trainer"


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


def test_scancel_signal_term_saves_inside_the_epoch_then_submitted_again_it_goes_on(
    cluster: Cluster, jobs: list[str]
) -> None:
    """`scancel --signal=TERM` inside epoch 2 of a run with name=, then the same sbatch submitted
    again: the new job (a new id) takes the ended job's folder over and continues at the saved batch,
    in the one folder, each epoch once. The second job's MASTER_PORT, exported by hand inside the
    ephemeral range (what enroot 3.x's hook would give), is one WARNING of node 0's."""
    name = "again"
    folder = f"{RUNS}/{name}"
    job_id = cluster.submit(train_args(3, name))
    jobs.append(job_id)
    wait_training(cluster, job_id)
    wait_until(lambda: cluster.results_epochs(folder) == [1], timeout=RUN_TIMEOUT, interval=1)
    sent = float(cluster.check("date +%s.%N"))
    cluster.check(f"scancel --signal=TERM {job_id}")
    job = cluster.wait_job(job_id, ENDED, RUN_TIMEOUT)
    out = cluster.output(job_id)
    assert "rank 0: 2 loader workers for training" in out and "rank 1: 2 loader workers" in out, out[-4000:]
    assert "stop requested (signal 15)" in out, out[-4000:]
    assert "DataLoader worker" not in out and "Traceback" not in out and "Killed" not in out, out[-4000:]
    assert "ephemeral range" not in out, out[-4000:]  # the sbatch's own port: above it
    assert job.fields.get("ExitCode") == "143:0", (job.fields, out[-4000:])  # every rank stopped on it
    state = last_pt(cluster, job_id, folder)
    epoch, done, batches = state["where"]
    assert epoch >= 1 and 0 < done <= batches, state  # inside epoch 2 or later (or its validation)
    assert state["saved"] > sent, (state, sent)
    # The cache in the job's temporary folder (no SLURM_TMPDIR or TMPDIR here: /tmp), private.
    for node in ("node0", "node1"):
        assert cluster.check(f"stat -c '%U %a' /tmp/yolo-rig-cache-{USER}", service=node).split() == [
            USER,
            "700",
        ]

    export = f"--export=ALL,TRAIN_ARGS={train_args(3, name)},MASTER_PORT=49159"
    again = cluster.submit(train_args(3, name), export)
    jobs.append(again)
    ended = cluster.wait_job(again, ENDED, RUN_TIMEOUT)
    out = cluster.output(again)
    assert ended.state == "COMPLETED", (ended.fields, out[-4000:])
    took = (
        rf"resume=auto: {PROJECT_DIR}/{name} is job {job_id} step \d+ on cluster yolo-rig's, which no longer"
    )
    assert re.search(took, out), out[-4000:]
    where = "at epoch 2/3 at batch" if epoch == 1 and done < batches else "at epoch"
    assert f"continuing {PROJECT_DIR}/{name}/weights/last.pt {where}" in out, out[-4000:]
    warnings = [line for line in out.splitlines() if "ephemeral range" in line]
    assert (
        len(warnings) == 1 and warnings[0].startswith("WARNING ") and "port 49159 is inside" in warnings[0]
    ), warnings
    assert cluster.results_epochs(folder) == [1, 2, 3], out[-4000:]  # each epoch once, in one folder
    assert cluster.run(f"ls -d {folder}-2")[0] != 0
    assert re.fullmatch(rf"slurm:yolo-rig:{again}\.\d+", cluster.check(f"cat {folder}/.rig-owner").strip())


def test_the_time_limit_requeues_and_the_run_goes_on_inside_the_epoch(
    cluster: Cluster, jobs: list[str]
) -> None:
    """A run longer than its time limit (--time=4:00, the warning 120 s before it): the ranks get TERM
    from the batch script, save at a batch boundary and the job is requeued (Restarts=1) before
    Slurm's own deadline; the next start continues at that batch and trains on (an epoch more in
    results.csv), where a stop that threw the epoch away would requeue it for ever."""
    epochs = 100
    # The helper's --export, with the scaled budget: a later --export wins.
    export = f"--export=ALL,TRAIN_ARGS={train_args(epochs)},STOP_WARNING_S=120,RIG_STOP_GRACE=40"
    job_id = cluster.submit(train_args(epochs), "--time=4:00", "--signal=B:USR1@120", export)
    jobs.append(job_id)
    wait_training(cluster, job_id)
    # Two nodes x one CPU rank: world 2, global rank 0 on node0.
    assert trainer_ranks(cluster, "node0") == {"RANK=0", "WORLD_SIZE=2"}
    assert trainer_ranks(cluster, "node1") == {"RANK=1", "WORLD_SIZE=2"}
    wait_until(lambda: cluster.job(job_id).restarts == 1, timeout=RUN_TIMEOUT, interval=2)
    first = cluster.output(job_id)
    assert "time limit near: stopping the ranks" in first, first[-4000:]
    assert "the ranks stopped (exit 143); requeueing job" in first, first[-4000:]
    assert "DataLoader worker" not in first and "Traceback" not in first, first[-4000:]
    assert "DUE TO TIME LIMIT" not in first, first[-4000:]  # requeued before Slurm's own deadline
    stop = re.search(
        r"stop: \S+ continues at (epoch (\d+)/100 (at batch \d+/\d+|trained, its validation next))", first
    )
    assert stop, first[-4000:]
    done = cluster.results_epochs(run_dir(job_id))
    # The second start continues at that batch and finishes that epoch and the next.
    resumed = f"continuing {run_dir(job_id).replace(RUNS, PROJECT_DIR)}/weights/last.pt at {stop.group(1)}"
    wait_until(lambda: resumed in cluster.output(job_id), timeout=RUN_TIMEOUT, interval=2)
    wait_until(
        lambda: len(cluster.results_epochs(run_dir(job_id))) >= len(done) + 2, timeout=RUN_TIMEOUT, interval=2
    )
    assert cluster.results_epochs(run_dir(job_id))[: len(done) + 2] == list(
        range(1, len(done) + 3)
    )  # each once
