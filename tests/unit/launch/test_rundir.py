"""The run directory: Ultralytics' names, one folder per job on every node, found again on a restart.

Real processes race for it (no mocks): what counts is what the file system ends up with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.launch import rundir

from tests.helpers import ENTRYPOINT


def _choose(project: Path, name: str, identity: str | None) -> rundir.Choice:
    return rundir.choose(project, name, rundir.scan(project, name), identity)


def test_new_runs_are_named_as_ultralytics_names_them(tmp_path: Path) -> None:
    # Ultralytics 8.4's increment_path: runs/detect/train, then train-2, train-3 (sep "-").
    assert _choose(tmp_path, "train", None) == rundir.Choice(tmp_path / "train", owned=False)
    (tmp_path / "train").mkdir()
    assert _choose(tmp_path, "train", None).path == tmp_path / "train-2"
    (tmp_path / "train-2").mkdir()
    (tmp_path / "train3").mkdir()  # the old naming is not Ultralytics': not a step of the sequence
    assert _choose(tmp_path, "train", None).path == tmp_path / "train-3"
    assert rundir.claim(tmp_path, "train", None) == tmp_path / "train-3"
    assert rundir.read_owner(
        tmp_path / "train-3",
    ).startswith("launch-")  # type: ignore[union-attr]


def test_a_job_finds_its_own_folder_and_another_job_gets_the_next(tmp_path: Path) -> None:
    assert rundir.claim(tmp_path, "exp", "slurm-42") == tmp_path / "exp"
    assert rundir.read_owner(tmp_path / "exp") == "slurm-42"
    assert rundir.claim(tmp_path, "exp", "slurm-43") == tmp_path / "exp-2"  # the same name=, another job
    assert rundir.claim(tmp_path, "exp", "slurm-42") == tmp_path / "exp"  # a requeued job: its own
    assert _choose(tmp_path, "exp", "slurm-43") == rundir.Choice(tmp_path / "exp-2", owned=True)
    assert rundir.claim(tmp_path, "exp", None) == tmp_path / "exp-3"  # a launch of no job: a new one


def test_folders_of_no_job_are_never_taken(tmp_path: Path) -> None:
    (tmp_path / "exp").mkdir()  # a user's empty folder: a rename would replace it, a claim does not
    (tmp_path / "exp-2").mkdir()
    (tmp_path / "exp-2" / rundir.OWNER_FILE).mkdir()  # an owner "file" that is not one
    assert rundir.claim(tmp_path, "exp", "slurm-42") == tmp_path / "exp-3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "exp-2", "exp-3"]  # no temporary left
    # A folder without an owner file is never adopted, not even under the job's default name:
    # another user can make train-slurm-<next job id> before the job starts.
    (tmp_path / "train-slurm-7").mkdir()
    assert rundir.claim(tmp_path, "train-slurm-7", "slurm-7") == tmp_path / "train-slurm-7-2"
    assert rundir.claim(tmp_path, "train-slurm-7", "slurm-8") == tmp_path / "train-slurm-7-3"


_RACE = """
import json, sys
from pathlib import Path
from rig.launch import rundir
print(json.dumps(str(rundir.claim(Path(sys.argv[1]), "exp", sys.argv[2] or None))))
"""


def test_the_nodes_of_two_jobs_started_at_once_agree_per_job(tmp_path: Path) -> None:
    # Twelve launchers at once: four nodes of job 42, four of job 43, four launches of no job.
    # Each job gets one folder for all its nodes; each launch of no job a folder of its own.
    env = {"PYTHONPATH": str(ENTRYPOINT)}
    owners = ["slurm-42", "slurm-43", ""] * 4
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, str(tmp_path), o], env=env, stdout=subprocess.PIPE, text=True
        )
        for o in owners
    ]
    got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    by_owner: dict[str, set[str]] = {}
    for owner, path in zip(owners, got, strict=True):
        by_owner.setdefault(owner, set()).add(Path(path).name)
    assert len(by_owner["slurm-42"]) == 1 and len(by_owner["slurm-43"]) == 1, by_owner
    assert len(by_owner[""]) == 4, by_owner
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["exp", *(f"exp-{n}" for n in range(2, 7))]), names  # nothing half-made left
    for path in got:
        assert rundir.read_owner(Path(path)) is not None


def test_the_claim_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(
        RigError, match=r"project folder .*/file is a file, not a folder: .*give project= a folder of your"
    ):
        rundir.claim(tmp_path / "file", "train", None)


def test_a_folder_whose_job_no_longer_runs_is_taken_over_once(tmp_path: Path) -> None:
    # Job 42 made exp and ended; job 43, the same name= submitted again (resume=auto), takes it
    # over: its owner file names job 43 from then on, so 43's other nodes (and a requeue) find it
    # as theirs, and a job 44 racing for the same hand-over gets the next folder.
    old, new = "slurm:hpc:42.0", "slurm:hpc:43.0"
    assert rundir.claim(tmp_path, "exp", old) == tmp_path / "exp"
    assert rundir.choose(tmp_path, "exp", rundir.scan(tmp_path, "exp"), new, [old]) == rundir.Choice(
        tmp_path / "exp", owned=False, take_from=old
    )
    assert rundir.claim(tmp_path, "exp", new) == tmp_path / "exp-2"  # not takeable: a new folder
    (tmp_path / "exp-2").rename(tmp_path / "elsewhere")
    assert rundir.claim(tmp_path, "exp", new, takeable=[old]) == tmp_path / "exp"
    assert rundir.read_owner(tmp_path / "exp") == new
    assert rundir.claim(tmp_path, "exp", new, takeable=[old]) == tmp_path / "exp"  # a peer node of 43
    assert rundir.claim(tmp_path, "exp", "slurm:hpc:44.0", takeable=[old]) == tmp_path / "exp-2"
    # Without a job (identity None) nothing is ever taken over.
    assert rundir.choose(tmp_path, "exp", rundir.scan(tmp_path, "exp"), None, [new]).take_from is None


_TAKE = """
import json, sys
from pathlib import Path
from rig.launch import rundir
print(json.dumps(str(rundir.claim(Path(sys.argv[1]), "exp", sys.argv[2], takeable=["slurm:hpc:42.0"]))))
"""


def test_two_jobs_taking_over_one_folder_at_once_each_end_in_one(tmp_path: Path) -> None:
    # Three nodes each of jobs 43 and 44, both submitted again for job 42's ended run: one job takes
    # exp (all its nodes), the other makes exp-2 (all its nodes).
    rundir.claim(tmp_path, "exp", "slurm:hpc:42.0")
    env = {"PYTHONPATH": str(ENTRYPOINT)}
    owners = ["slurm:hpc:43.0", "slurm:hpc:44.0"] * 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TAKE, str(tmp_path), o], env=env, stdout=subprocess.PIPE, text=True
        )
        for o in owners
    ]
    got = [Path(json.loads(p.communicate(timeout=120)[0])).name for p in procs]
    by_owner: dict[str, set[str]] = {}
    for owner, name in zip(owners, got, strict=True):
        by_owner.setdefault(owner, set()).add(name)
    assert sorted(n for names in by_owner.values() for n in names) == ["exp", "exp-2"], by_owner
    for owner, (name,) in by_owner.items():
        assert rundir.read_owner(tmp_path / name) == owner


def test_a_hand_over_under_way_is_never_made_twice(tmp_path: Path) -> None:
    # Job 43 has linked its name at the hand-over's marker, its owner file not written yet (as
    # between the two steps): job 44, which read the same old owner, does not take the folder; a
    # peer node of 43 does.
    old = "slurm:hpc:42.0"
    run = rundir.claim(tmp_path, "exp", old)
    assert rundir._take(run, old, "slurm:hpc:43.0", {})
    (run / rundir.OWNER_FILE).write_text(old + "\n")  # 43's owner file not yet there
    assert not rundir._take(run, old, "slurm:hpc:44.0", {})
    assert rundir.read_owner(run) == old
    assert rundir._take(run, old, "slurm:hpc:43.0", {}) and rundir.read_owner(run) == "slurm:hpc:43.0"
