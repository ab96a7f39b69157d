"""Two users on one shared runs folder, the image as shipped: B (uid 2002) plants pickles, owner files,
links and folders; A (uid 2001) plans with --dry-run, trains with resume=auto and asks resume=True as
a Slurm job would; both are in a team group whose share B may rename anything in, and B swaps A's
folder there while A's resumed trainers start. One container (4 GiB) runs every probe
(tests/scripts/shared_runs_probe.sh); the tests read its lines."""

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
        mem_limit="4g",  # the pickle bomb's reading must stay bounded within it
        memswap_limit="4g",
        tmpfs={"/workspace/runs": "mode=1777,size=1g"},  # the shared runs folder: a mount, as on a cluster
        volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
    )
    try:
        status = container.wait(timeout=600)
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    lines: dict[str, str] = {"OOM": str(status.get("StatusCode"))}
    for line in logs.splitlines():
        key, _, rest = line.partition(" ")
        if key in {"STEP", "SWAPPED"}:
            step, _, rest = rest.partition(" ")
            lines[f"{key}-{step}" if key != "STEP" else step] = rest
        elif key in {"MODES", "THEIRS", "MARKER", "LEFT", "RESUMED", "BOMB"}:
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
        ("dry-resume-theirs", "detect/train-slurm-4243 belongs to uid 2002, not to you (uid 2001)"),
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


# ---- the team share, B's sticky folder, the share group, name=, the pickle bomb --------------------
def test_the_team_shares_write_access_is_refused_unless_the_user_names_the_group(
    probe: dict[str, str],
) -> None:
    says = (
        "/workspace/runs/team can be written by gid 3000 (team) (mode 2775); chmod g-w it, or set RIG_SHARE"
    )
    assert probe["team-unshared"].startswith("rc=1 ERROR rig: ") and says in probe["team-unshared"], probe
    assert probe["team-stopped"].startswith("rc=143 "), probe["team-stopped"]  # the checkpoint to resume


@pytest.mark.parametrize(
    ("step", "started"),
    [("resume-true", "team-resume-true"), ("resume-auto", "team-requeued"), ("rig-yolo", "team-rig-yolo")],
)
def test_bs_swap_during_as_start_runs_nothing_of_bs_and_a_trains_from_its_own(
    probe: dict[str, str], step: str, started: str
) -> None:
    assert probe[f"SWAPPED-{step}"] == "2002", probe  # B's pickle was at the path while A's trainer started
    done = probe[started]
    assert done.startswith("rc=0 "), done  # trained, from A's own checkpoint (the marker: none)
    assert probe["MARKER"] == "", probe


def test_a_resume_keeps_its_run_folder_and_leaves_no_copy(probe: dict[str, str]) -> None:
    # The resumed run wrote its results where its checkpoint's run folder is (B had put a folder of
    # its own there): not beside the private copy, which is gone once the run ended.
    assert probe["RESUMED"].split(), probe
    assert probe["LEFT"] == "", probe


def test_a_run_folder_in_bs_sticky_folder_is_one_line(probe: dict[str, str]) -> None:
    says = "/workspace/runs/bobs-share belongs to uid 2002"
    assert probe["bobs-sticky"].startswith("rc=1 ERROR rig: project folder ") and says in probe["bobs-sticky"]


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("group-²", "RIG_SHARE_GROUP='²' is not a group of this system"),
        ("group-99999999999999999999", "RIG_SHARE_GROUP='99999999999999999999' is not a group id"),
        ("group-4294967295", "RIG_SHARE_GROUP='4294967295' is not a group id (0 to 4294967294)"),
        ("name-c285", "name=a\\x85b: holds control or format characters"),
        ("name-e280a8", "name=a\\u2028b: holds control or format characters"),
        ("name-e280ae", "name=a\\u202eb: holds control or format characters"),
    ],
)
def test_bad_share_groups_and_names_are_one_line_in_a_dry_run(
    probe: dict[str, str], step: str, says: str
) -> None:
    assert probe[step].startswith(f"rc=1 ERROR rig: {says}"), probe[step]


def test_a_pickle_bomb_of_200_kb_is_one_line_not_an_oom(probe: dict[str, str]) -> None:
    assert int(probe["BOMB"]) < 250_000, probe["BOMB"]
    says = "train-slurm-4400/weights/last.pt cannot be read (reading it needs more than 1024 MiB of memory"
    assert probe["bomb"].startswith("rc=1 ERROR rig: resume=auto: ") and says in probe["bomb"], probe["bomb"]
    assert probe["OOM"] == "0", probe  # the probe ran to its end
