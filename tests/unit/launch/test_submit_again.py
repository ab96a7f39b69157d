"""resume=auto with the same name= in a new Slurm job (submitted again), or in another step of the
same job: the run's folder is continued once its owner no longer runs (squeue says so), a finished
run is one line, a running one (or one Slurm cannot tell about) leaves this job a new folder. The
whole plan of `rig train`, squeue a stand-in on PATH (the real one: tests/cluster/test_slurm_stop.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import rig
from rig.launch import autoresume, job, rundir, trainplan

from tests.helpers.fakesys import FakeSys
from tests.unit.launch.test_autoresume import _ckpt


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-node Slurm job's environment on cluster hpc, and squeue answering what `answer` holds
    (its first line the exit code); the folder of the stand-in returned."""
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_"))]:
        monkeypatch.delenv(k)
    for k in ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "RDZV_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "hpc")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setattr(logging.getLogger("rig"), "level", logging.INFO)  # the INFO lines, for caplog
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text(
        '#!/bin/sh\necho "$*" >> "${0%/*}/asked"\n{ read -r rc; cat; } < "${0%/*}/answer"; exit "$rc"\n'
    )
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


def _answer(bin_dir: Path, text: str, rc: int = 0) -> None:
    (bin_dir / "answer").write_text(f"{rc}\n{text}")


def _plan(tmp_path: Path, job_id: str, *extra: str) -> trainplan.Plan:
    """The plan `rig train` makes in job job_id, as far as the decision (nothing written)."""
    env = {**os.environ, "SLURM_JOB_ID": job_id}
    root = tmp_path / "sys"
    if not root.exists():
        FakeSys(root).node(0, "0-3").online("0-3")
    kv = ["device=cpu", "data=x.yaml", "model=m.yaml", f"project={tmp_path}/runs", "resume=auto", *extra]
    request = trainplan.parse(kv, gpus=None, cpu_ranks_given="2", environ=env)
    node = trainplan.discover(env, lambda: job.topology(str(root)), rig.USER_ENVIRON)
    return trainplan.decide(request, node, trainplan.discover_run(request.args, node))


def _stopped_run(tmp_path: Path, owner: str, monkeypatch: pytest.MonkeyPatch, **ckpt: Any) -> Path:
    """exp as job `owner` left it: claimed, its last.pt in the middle of the run (or as ckpt says)."""
    runs = tmp_path / "runs"
    run = rundir.claim(runs, "exp", owner)
    (run / "weights/last.pt").write_bytes(b"x")
    state = _ckpt(**(ckpt or {"epoch": 1, "done": 4}))
    monkeypatch.setattr(autoresume, "_load", lambda _p: state)
    return run


def test_the_same_name_submitted_again_continues_the_run(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    run = _stopped_run(tmp_path, "slurm:hpc:77.0", monkeypatch)
    _answer(slurm, "CANCELLED+\n")  # job 77: scancel --signal=TERM, then it ended
    plan = _plan(tmp_path, "78", "name=exp")
    assert (slurm / "asked").read_text().split() == ["-h", "-t", "all", "-j", "77", "-o", "%T"]
    assert plan.args["resume"] == "True" and plan.args["model"] == str(run / "weights/last.pt"), plan.args
    err = caplog.text
    assert f"{run} is job 77 step 0 on cluster hpc's, which no longer runs (CANCELLED+)" in err, err
    assert "continuing" in err and "at epoch 3/3 at batch 5/10" in err
    # Before it trains, the folder becomes job 78's: its other nodes and its requeue find it theirs.
    assert trainplan.reserve_run_dir(plan) == plan and rundir.read_owner(run) == "slurm:hpc:78.0"
    # A third submission while 78 runs (or waits requeued): a new folder, started fresh.
    _answer(slurm, "PENDING\n")
    third = _plan(tmp_path, "79", "name=exp")
    assert third.run is not None and third.run.path == run.parent / "exp-2" and "resume" not in third.args
    assert "resume=auto: not taking over exp (job 78 step 0 on cluster hpc: PENDING)" in caplog.text


def test_the_same_name_submitted_again_after_the_end_is_one_line(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _stopped_run(tmp_path, "slurm:hpc:77.0", monkeypatch, epoch=-1, stripped=True)
    _answer(slurm, "slurm_load_jobs error: Invalid job id specified\n", rc=1)  # long gone
    plan = _plan(tmp_path, "78", "name=exp")
    assert plan.done == f"resume=auto: {run} is finished ({run}/weights/last.pt); nothing to train"
    assert rundir.read_owner(run) == "slurm:hpc:77.0"  # nothing taken, nothing written


def test_an_older_rigs_owner_file_is_continued_too(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _stopped_run(tmp_path, "slurm-77", monkeypatch)
    _answer(slurm, "COMPLETED\n")
    plan = _plan(tmp_path, "78", "name=exp")
    assert plan.args.get("model") == str(run / "weights/last.pt")


def test_when_slurm_cannot_be_asked_nothing_is_taken_and_a_warning_says_why(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    run = _stopped_run(tmp_path, "slurm:hpc:77.0", monkeypatch)
    _answer(slurm, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n", rc=1)
    plan = _plan(tmp_path, "78", "name=exp")
    assert plan.run is not None and plan.run.path == run.parent / "exp-2" and "resume" not in plan.args
    warnings = [
        line
        for line in [r.levelname + " " + r.getMessage() for r in caplog.records]
        if line.startswith("WARNING")
    ]
    assert len(warnings) == 1 and "cannot ask Slurm whether job 77 step 0" in warnings[0], warnings
    assert f"resume=True model={run}/weights/last.pt" in warnings[0]


def test_a_job_of_another_cluster_is_never_taken(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stopped_run(tmp_path, "slurm:other:77.0", monkeypatch)
    _answer(slurm, "COMPLETED\n")
    plan = _plan(tmp_path, "78", "name=exp")
    assert plan.run is not None and plan.run.path.name == "exp-2" and not (slurm / "asked").exists()


def test_two_steps_at_once_get_two_folders_a_later_step_finds_the_run_finished(
    tmp_path: Path, slurm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Job 80's step 0 trains exp; step 1 of the same job, with the same name=, while step 0 runs.
    run = _stopped_run(tmp_path, "slurm:hpc:80.0", monkeypatch)
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    _answer(slurm, "80.batch\n80.0\n80.1\n")
    plan = _plan(tmp_path, "80", "name=exp")
    assert (slurm / "asked").read_text().split() == ["-h", "-s", "-j", "80", "-o", "%i"]
    assert plan.run is not None and plan.run.path.name == "exp-2" and "resume" not in plan.args
    # Step 2, once step 0 finished the run: one line, nothing trained.
    monkeypatch.setattr(autoresume, "_load", lambda _p: _ckpt(-1, stripped=True))
    monkeypatch.setenv("SLURM_STEP_ID", "2")
    _answer(slurm, "80.batch\n80.2\n")
    done = _plan(tmp_path, "80", "name=exp")
    assert done.done == f"resume=auto: {run} is finished ({run}/weights/last.pt); nothing to train"
