"""Two users on one shared runs folder, the image as shipped: B (uid 2002) plants pickles, owner files,
links and folders; A (uid 2001) plans with --dry-run, trains with resume=auto and asks resume=True as
a Slurm job would. One container runs every probe (tests/scripts/shared_runs_probe.sh); the tests
read its lines."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.helpers import SCRIPTS

TRAINER_ARGS = re.compile(r"\bname=(\S+)")


@pytest.fixture(scope="module")
def probe(docker_client: Any, image: str) -> dict[str, str]:
    container = docker_client.containers.run(
        image,
        ["bash", "/tests/shared_runs_probe.sh"],
        detach=True,
        environment={"RIG_USER": "root"},
        network_mode="none",
        shm_size="512m",
        volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
    )
    try:
        container.wait(timeout=300)
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    lines: dict[str, str] = {}
    for line in logs.splitlines():
        key, _, rest = line.partition(" ")
        if key == "STEP":
            step, _, rest = rest.partition(" ")
            lines[step] = rest
        elif key in {"MODES", "THEIRS", "MARKER"}:
            lines[key] = rest.strip()
    assert "MARKER" in lines, logs[-3000:]
    return lines


def test_no_plan_and_no_run_of_a_unpickles_bs_checkpoint(probe: dict[str, str]) -> None:
    assert probe["MARKER"] == "", probe  # the uids that executed B's pickle: none


@pytest.mark.parametrize(
    ("step", "name"),
    [
        ("dry-auto-4242", "train-slurm-4242-2"),  # B's folder without an owner file: not adopted
        ("dry-auto-4243", "train-slurm-4243-2"),  # B's folder with A's job in its owner file
        ("dry-auto-4260", "train-slurm-4260-2"),  # B's link to A's earlier run
    ],
)
def test_a_job_never_takes_a_folder_b_planted_for_it(probe: dict[str, str], step: str, name: str) -> None:
    assert probe[step].startswith("rc=0 "), probe[step]
    assert TRAINER_ARGS.findall(probe[step]) == [name], probe[step]


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("dry-resume-true", "ERROR rig: resume=True: no last.pt under /workspace/runs"),
        ("dry-resume-theirs", "train-slurm-4243/weights/last.pt belongs to uid 2002, not to you (uid 2001)"),
        ("dry-exist-ok-theirs", "detect/bobs belongs to uid 2002, not to you (uid 2001)"),
        ("dry-project-theirs", "project folder /workspace/runs/alice belongs to uid 2002"),
    ],
)
def test_what_a_names_of_bs_is_one_line(probe: dict[str, str], step: str, says: str) -> None:
    assert probe[step].startswith("rc=1 ERROR rig: ") and says in probe[step], probe[step]


def test_a_trains_in_a_private_folder_and_writes_nothing_of_bs(probe: dict[str, str]) -> None:
    assert probe["train-auto-4242"].startswith("rc=0 "), probe["train-auto-4242"]
    run = "/workspace/runs/detect/train-slurm-4242-2"
    assert probe["MODES"] == f"{run} 700 2001 {run}/weights/last.pt 600 2001", probe["MODES"]
    assert probe["THEIRS"] == "", probe["THEIRS"]  # nothing of A's in B's folders
