"""Slurm's jobs as run folders' owners: who a task is, the owner files of older rigs, and whether an
owner still runs, from squeue's answers (the real squeue runs on the local cluster:
tests/cluster/test_slurm_stop.py)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from rig.launch import nodes, slurmjobs
from rig.launch.slurmjobs import ALIVE, GONE, UNKNOWN, Owner


def test_a_task_is_its_clusters_job_and_step() -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "1", "SLURM_CLUSTER_NAME": "hpc"}
    assert slurmjobs.from_environ(env) == Owner("hpc", "77", "1")
    assert nodes.job_identity(env) == "slurm:hpc:77.1"
    assert nodes.job_identity({"SLURM_JOB_ID": "77"}) == "slurm::77"  # no step: rig train in the batch script
    assert slurmjobs.from_environ({"SLURM_CLUSTER_NAME": "hpc"}) is None
    # The default name stays the job's (every step of a job that gives no name= shares the sequence).
    assert nodes.job_name(env) == "slurm-77"


@pytest.mark.parametrize(
    ("text", "owner"),
    [
        ("slurm:hpc:77.1", Owner("hpc", "77", "1")),
        ("slurm::77", Owner("", "77", "")),
        ("slurm-77", Owner("", "77", "")),  # an older rig's owner file: still read
        ("slurm:hpc:x7", None),
        ("slurm:a/b:7", None),
        ("launch-host-1-ab", None),
        ("mnist-job", None),
        (None, None),
    ],
)
def test_owner_files_old_and_new_are_read(text: str | None, owner: Owner | None) -> None:
    assert slurmjobs.parse(text) == owner
    if owner is not None and not text.startswith("slurm-"):  # type: ignore[union-attr]
        assert owner.identity == text


ME = Owner("hpc", "80", "0")


@pytest.mark.parametrize(
    ("rc", "out", "state"),
    [
        (0, "RUNNING\n", ALIVE),
        (0, "PENDING\n", ALIVE),  # requeued, waiting: it comes back for its folder
        (0, "COMPLETING\n", ALIVE),  # its ranks may still be saving
        (0, "SUSPENDED\n", ALIVE),
        (0, "COMPLETED\n", GONE),
        (0, "CANCELLED+\n", GONE),  # squeue's "CANCELLED by uid"
        (0, "TIMEOUT\n", GONE),
        (0, "", GONE),  # squeue no longer shows it
        (1, "slurm_load_jobs error: Invalid job id specified\n", GONE),
        (1, "slurm_load_jobs error: Unable to contact slurm controller\n", UNKNOWN),
        (124, "squeue gave no answer in 10 s", UNKNOWN),
    ],
)
def test_whether_another_job_runs_is_squeues_answer(rc: int, out: str, state: str) -> None:
    owner = Owner("hpc", "77", "0")
    assert slurmjobs.query(owner, ME) == ["squeue", "-h", "-t", "all", "-j", "77", "-o", "%T"]
    assert slurmjobs.classify(owner, ME, rc, out) == state


def test_another_step_of_this_job_runs_while_squeue_lists_it() -> None:
    step0 = Owner("hpc", "80", "0")
    me = Owner("hpc", "80", "1")
    assert slurmjobs.query(step0, me) == ["squeue", "-h", "-s", "-j", "80", "-o", "%i"]
    assert slurmjobs.classify(step0, me, 0, "80.0\n80.batch\n80.extern\n") == ALIVE
    assert slurmjobs.classify(step0, me, 0, "80.batch\n80.extern\n80.10\n") == GONE


def test_verdicts_without_asking() -> None:
    def never(_argv: object, _timeout: float) -> tuple[int, str]:
        raise AssertionError("squeue asked")

    other_cluster = slurmjobs.verdict(Owner("other", "77", "0"), ME, never)
    assert other_cluster.state == ALIVE and "cluster other" in other_cluster.why  # never taken
    assert slurmjobs.verdict(Owner("", "80"), ME, never).state == GONE  # an older rig's, this job's
    assert slurmjobs.verdict(ME, ME, never).state == ALIVE


def test_squeue_missing_or_silent_is_unknown_never_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleep = shutil.which("sleep")
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = slurmjobs.verdict(Owner("hpc", "77", "0"), ME)
    assert missing.state == UNKNOWN and "not on PATH" in missing.why, missing
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\nexec {sleep} 30\n")
    squeue.chmod(0o755)
    began = time.monotonic()
    silent = slurmjobs.verdict(Owner("hpc", "77", "0"), ME, timeout=0.5)
    assert silent.state == UNKNOWN and "no answer" in silent.why and time.monotonic() - began < 10, silent
    squeue.write_text("#!/bin/sh\n[ \"$*\" = '-h -t all -j 77 -o %T' ] && echo COMPLETED\n")
    assert slurmjobs.verdict(Owner("hpc", "77", "0"), ME).state == GONE
