"""A stop loses nothing, through the paths users stop runs by, with loader workers as every GPU run has
them (CPU ranks keep theirs: workers=2):

- `docker stop` of `make train` (TERM to the container's PID 1, as Docker and the kubelet send it) on
  two CPU ranks: exit 143, a checkpoint written after the signal at a batch boundary, no worker
  crash; `resume=auto` continues inside the epoch, and the final weights equal the uninterrupted
  run's bit for bit (augmentation off, deterministic, seed 0);
- a SIGKILL after a periodic checkpoint (RIG_CHECKPOINT_EVERY=5) loses seconds, resume=auto continues
  from it; a stop during a validation pass saves the epoch as trained and resume validates it, each
  epoch once in results.csv; with augmentation on (and `cache=ram`, which the launch picks here) the
  run killed, stopped and resumed twice has the uninterrupted run's results and weights exactly.
More resume paths: test_resumes.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS, checkpoints
from tests.helpers.compose import take_down
from tests.helpers.containers import Containers
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.image, pytest.mark.slow]

TINY = SCRIPTS / "tiny_detect.yaml"  # the smallest detection model: seconds an epoch on two CPUs
# Augmentation off, so that two uninterrupted runs are equal bit for bit.
EXACT = "deterministic=True seed=0 mosaic=0 hsv_h=0 hsv_s=0 hsv_v=0 fliplr=0 translate=0 scale=0 erasing=0"
# 128 images at batch 4 over 2 ranks: 32 batches of 2 an epoch per rank, the optimizer stepping every
# 16 (nbs 64): a stop lands between two steps, with gradients accumulated.
TRAIN = f"device=cpu --cpu-ranks 2 workers=2 epochs=3 imgsz=64 batch=4 plots=False {EXACT}"
RUNS = "/workspace/runs/detect"


def _make_argv(*args: str) -> list[str]:
    """`make -s ARGS` on the image under test, on the CPU, the checkout's .env neither read nor
    written, no /metrics port published (several runs at once)."""
    name, tag = os.environ.get("IMAGE", "yolo-rig:cu121").rsplit(":", 1)
    settings = ["CPU_ONLY=yes", "ENV_FILE=/dev/null", "TRAIN_METRICS_PORT=0"]
    return ["make", "-s", *args, f"IMAGE={name}", f"TAG={tag}", *settings]


def _make(project: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project}
    return subprocess.run(
        _make_argv(*args),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def project() -> Iterator[str]:
    name = unique("stop")
    try:
        yield name
    finally:
        take_down(name, stop_s=5)


def _oneoff(docker_client: Any, project: str) -> Any:
    found = docker_client.containers.list(
        filters={"label": [f"com.docker.compose.project={project}", "com.docker.compose.oneoff=True"]}
    )
    return found[0] if len(found) == 1 else None


def _in_workstation(project: str, *cmd: str) -> str:
    """cmd in a one-shot container of the project, with the test scripts at /tests."""
    out = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            "compose.yaml",
            "-f",
            "compose.cpu.yaml",
            "-p",
            project,
            "run",
            "--rm",
            "--no-deps",
            "-v",
            f"{SCRIPTS}:/tests:ro",
            "workstation",
            *cmd,
        ],
        cwd=REPO,
        env={**os.environ, "IMAGE": os.environ.get("IMAGE", "yolo-rig:cu121")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_docker_stop_of_make_train_keeps_the_batch_and_the_resumed_run_is_the_whole_one(
    project: str, docker_client: Any
) -> None:
    made = _make(project, "demo-data", "DEMO_ARGS=--train 128 --val 16 --imgsz 64", timeout=300)
    assert made.returncode == 0, made.stdout
    train = ["train", f"MODEL={TINY}"]
    whole = _make(project, *train, f"TRAIN_ARGS={TRAIN} name=whole")
    assert whole.returncode == 0, whole.stdout[-4000:]
    for rank in (0, 1):  # each rank trains with its workers (Ultralytics sets 0 on the CPU)
        assert f"INFO trainer: rank {rank}: 2 loader workers for training" in whole.stdout, whole.stdout[
            -4000:
        ]

    # The same run, stopped by `docker stop` in its second epoch, then the same command again.
    cut = [*train, f"TRAIN_ARGS={TRAIN} name=cut resume=auto"]
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project}
    log = Path(f"/tmp/{project}.log")
    with log.open("w") as out:
        make = subprocess.Popen(
            _make_argv(*cut),
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        container = wait_until(lambda: _oneoff(docker_client, project), timeout=120, interval=1)
        csv = f"{RUNS}/cut/results.csv"
        epochs = f"test $(tail -n +2 {csv} 2>/dev/null | wc -l) -ge 1"
        wait_until(lambda: container.exec_run(["sh", "-c", epochs]).exit_code == 0, timeout=600, interval=1)
        sent = time.time()
        # TERM to PID 1, KILL after the container's stop timeout: compose's stop_grace_period.
        subprocess.run(["docker", "stop", container.id], capture_output=True, timeout=300, check=True)
        make.wait(timeout=300)
    finally:
        make.kill()
        text = log.read_text()
        log.unlink()
    assert "Error 143" in text, text[-4000:]  # make passes the container's 128 + SIGTERM on
    assert "DataLoader worker" not in text and "Traceback" not in text, text[-4000:]
    stop = re.search(r"INFO trainer: stop: \S+ continues at epoch (\d)/3 at batch (\d+)/32", text)
    assert stop, text[-4000:]
    ckpts = json.loads(
        _in_workstation(project, "python", "/tests/checkpoint_epochs.py", f"{RUNS}/cut/weights")
    )
    epoch, where, _best, saved = ckpts["last.pt"]
    assert where == [int(stop.group(1)) - 1, int(stop.group(2)) - 1, 32] and epoch == max(where[0] - 1, 0), (
        ckpts
    )
    assert saved > sent, (saved, sent)  # written after the signal, at the batch it stopped

    resumed = _make(project, *cut)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    assert (
        f"continuing {RUNS}/cut/weights/last.pt at epoch {stop.group(1)}/3 at batch {stop.group(2)}/32"
        in (resumed.stdout)
    ), resumed.stdout[-4000:]
    same = json.loads(
        _in_workstation(
            project,
            "python",
            "/tests/same_weights.py",
            f"{RUNS}/whole/weights/last.pt",
            f"{RUNS}/cut/weights/last.pt",
        )
    )
    assert same["model"][0] == 0, same  # the stripped last.pt: the EMA, as Ultralytics saves it
    assert "rig_resume.model" not in same, same  # the end of training's rewrite dropped the fp32 state
    again = _make(project, *cut)
    assert again.returncode == 0 and f"resume=auto: {RUNS}/cut is finished" in again.stdout, again.stdout[
        -3000:
    ]


def test_a_sigkill_loses_seconds_and_a_stop_during_validation_keeps_the_epoch(
    containers: Containers, docker_client: Any
) -> None:
    """One CPU rank with 2 workers, augmentation on: RIG_CHECKPOINT_EVERY=5, SIGKILL to the whole
    container once a periodic checkpoint is written; resume=auto continues from it; stopped again
    while it validates (a slow validation pass), and resumed once more: every epoch once, and the
    results and weights of the same run uninterrupted."""
    volume = docker_client.volumes.create(unique())
    try:
        mounts = {
            volume.name: {"bind": "/runs", "mode": "rw"},
            str(SCRIPTS): {"bind": "/tests", "mode": "ro"},
        }
        data = "rig demo-data /runs/demo --train 96 --val 32 --imgsz 64 >/dev/null"
        train = (
            "rig train device=cpu workers=2 data=/runs/demo/data.yaml model=/tests/tiny_detect.yaml epochs=3 "
            "imgsz=64 batch=2 plots=False project=/runs/detect name=k resume=auto"
        )
        # The same run uninterrupted first (augmentation on: its draws are the resumed run's too).
        whole = train.replace("name=k resume=auto", "name=whole")
        # Each batch 0.2 s longer, only in the run to kill: its epochs outlast the 5 s, however fast
        # the box (an epoch's end is a checkpoint too, and starts the interval again).
        slow_train = "PYTHONPATH=/tests/slow_clock RIG_TEST_TRAIN_BATCH_S=0.2"
        env = {"RIG_USER": "root", "RIG_CHECKPOINT_EVERY": "5"}
        c = containers.run(
            ["bash", "-c", f"{data} && {whole} > /runs/whole.log 2>&1 && exec env {slow_train} {train}"],
            volumes=mounts,
            environment=env,
            shm_size="1g",
        )
        started = "INFO trainer: rank 0: 2 loader workers for training"  # rig's lines are never held back
        wait_until(lambda: started in c.logs().decode(errors="replace"), timeout=1200, interval=1)
        # Every 5 s at a batch boundary: the first within seconds of the first batch.
        wrote = "INFO trainer: checkpoint: "
        wait_until(lambda: wrote in c.logs().decode(errors="replace"), timeout=120, interval=1)
        time.sleep(3)
        c.kill()  # SIGKILL: the OOM killer, a lost node
        killed = time.time()
        c.wait(timeout=60)
        logs = c.logs().decode(errors="replace")
        # Checkpoints every 5 s and a batch: the newest is at most a few seconds old.
        checker = containers.run(["sleep", "900"], volumes=mounts, environment={"RIG_USER": "root"})
        epoch, where, _best, saved = checkpoints.epochs(containers, checker, "/runs/detect/k/weights")[
            "last.pt"
        ]
        print(f"INFO test: the newest checkpoint was {killed - saved:.1f} s old at the SIGKILL")
        assert killed - saved <= 10, (killed - saved, logs[-3000:])
        assert where is not None and epoch == max(where[0] - 1, 0), where

        # The same command again, with each validation batch a second longer; TERM while it validates.
        slow = "PYTHONPATH=/tests/slow_clock RIG_TEST_VAL_BATCH_S=1"
        run = f"cd /runs && ({slow} {train}; echo $? > /runs/rc) > /runs/t2.log 2>&1 &"
        assert containers.exec(checker, f"rm -f /runs/rc; {run}", 30)[0] == 0
        validating = "grep -q 'mAP50-95' /runs/t2.log"
        wait_until(lambda: containers.exec(checker, validating, 10)[0] == 0, timeout=600, interval=1)
        containers.exec(checker, "pkill -TERM -f 'rig.launch.trainer'", 10)
        wait_until(lambda: containers.exec(checker, "test -s /runs/rc", 10)[0] == 0, timeout=300, interval=1)
        log = containers.exec(checker, "cat /runs/t2.log", 10)[1]
        assert containers.exec(checker, "cat /runs/rc", 10)[1].strip() == "143", log[-4000:]
        at = f"at epoch {where[0] + 1}/3 " + (
            f"at batch {where[1] + 1}/{where[2]}" if where[1] else "from its start"
        )
        assert f"resume=auto: continuing /runs/detect/k/weights/last.pt {at}" in log, log[-4000:]
        val = re.search(
            r"INFO trainer: stop: \S+ continues at epoch (\d)/3 trained, its validation next", log
        )
        assert val and "Traceback" not in log, log[-4000:]
        rows = containers.exec(
            checker, "tail -n +2 /runs/detect/k/results.csv 2>/dev/null | cut -d, -f1", 10
        )[1].split()
        assert [int(float(r)) for r in rows] == list(range(1, int(val.group(1)))), rows  # not yet validated

        rc, log = containers.exec(checker, f"cd /runs && {train} 2>&1", 900)
        assert rc == 0, log[-4000:]
        validates = f"epoch {val.group(1)}/3 trained, its validation next"
        assert f"continuing /runs/detect/k/weights/last.pt at {validates}" in log, log[-4000:]
        rows = containers.exec(
            checker, "tail -n +2 /runs/detect/k/results.csv 2>/dev/null | cut -d, -f1", 10
        )[1].split()
        assert [int(float(r)) for r in rows] == [1, 2, 3], log[-3000:]  # each epoch once
        # Killed, stopped while validating, resumed twice: every loss, metric and learning rate of
        # every epoch (results.csv but its time column) and the final weights are the whole run's.
        columns = "tail -n +2 /runs/detect/{}/results.csv | cut -d, -f1,3-"
        ours = containers.exec(checker, columns.format("k"), 10)[1]
        assert ours == containers.exec(checker, columns.format("whole"), 10)[1], ours
        same = (
            "python /tests/same_weights.py /runs/detect/whole/weights/last.pt /runs/detect/k/weights/last.pt"
        )
        rc, out = containers.exec(checker, same, 120)
        assert rc == 0 and json.loads(out.strip().splitlines()[-1])["model"][0] == 0, out
    finally:
        containers.cleanup()
        volume.remove(force=True)
