"""Every stop path's time budget, read from what ships: a stop signal gives the ranks RIG_STOP_GRACE to
finish their batch and save, then torchrun, the launcher and the container need a moment to end. Each
outer grace (Docker's for `make train` and the workstation, the workstation's for its sessions' jobs,
Kubernetes' for the PyTorchJob's pods, the sbatch's warning before the time limit) must cover it, or
whoever comes after kills the ranks while they save."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from rig.launch import ddp

from tests.helpers import pytorchjob

REPO = Path(__file__).resolve().parents[3]
# torchrun's close, its exit, rig's, tini's: measured in seconds on a busy 2-core box (the image tests).
TEARDOWN_S = 10


def _seconds(text: str) -> int:
    match = re.fullmatch(r"(\d+)s?", text.strip())
    assert match, text
    return int(match.group(1))


def test_docker_waits_longer_than_the_ranks_and_the_sessions() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    grace = _seconds(compose["services"]["workstation"]["stop_grace_period"])
    # `make train` runs this service: docker stop of it TERMs rig train (torchrun) through tini.
    assert grace >= ddp.STOP_GRACE_S + TEARDOWN_S
    # The workstation: its sessions' jobs (a rig train among them), then its services.
    from rig.commands import serve

    session, services = serve.SESSION_GRACE.default, serve.STOP_TIMEOUT.default
    assert session is not None and services is not None
    assert (serve.SESSION_GRACE.name, serve.STOP_TIMEOUT.name) == ("RIG_SESSION_GRACE", "RIG_STOP_TIMEOUT")
    assert session >= ddp.STOP_GRACE_S + TEARDOWN_S
    assert grace > session + services


def test_kubernetes_waits_longer_than_the_ranks() -> None:
    pod = pytorchjob.load().spec.pytorch_replica_specs["Master"].template.spec
    assert pod.termination_grace_period_seconds >= ddp.STOP_GRACE_S + TEARDOWN_S


def test_the_sbatch_warning_leaves_room_for_the_stop_and_the_requeue() -> None:
    script = (REPO / "deploy/slurm.sbatch").read_text()
    warning = int(re.search(r"^#SBATCH --signal=B:USR1@(\d+)$", script, re.M).group(1))  # type: ignore[union-attr]
    said = int(re.search(r"^STOP_WARNING_S=\$\{STOP_WARNING_S:-(\d+)\}$", script, re.M).group(1))  # type: ignore[union-attr]
    teardown = int(re.search(r"^TEARDOWN_S=(\d+)$", script, re.M).group(1))  # type: ignore[union-attr]
    grace = int(re.search(r"^export RIG_STOP_GRACE=\$\{RIG_STOP_GRACE:-(\d+)\}$", script, re.M).group(1))  # type: ignore[union-attr]
    assert said == warning, "the script's budget names another warning than its --signal line"
    assert grace == ddp.STOP_GRACE_S
    assert teardown >= TEARDOWN_S
    # `scontrol requeue` takes a second; Slurm may send the warning up to a minute late or early.
    assert grace + teardown + 5 <= warning
