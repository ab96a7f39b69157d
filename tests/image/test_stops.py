"""A stop loses nothing, through the paths users stop runs by, with loader workers as every GPU run has
them (CPU ranks keep theirs: workers=2):

- `docker stop` of `make train` (TERM to the container's PID 1, as Docker and the kubelet send it) on
  two CPU ranks: exit 143, a checkpoint written after the signal at a batch boundary, no worker
  crash; `resume=auto` continues inside the epoch, and the final weights equal the uninterrupted
  run's bit for bit (augmentation off, deterministic, seed 0);
- a SIGKILL after a periodic checkpoint (RIG_CHECKPOINT_EVERY=5) loses seconds, resume=auto continues
  from it; a stop during a validation pass saves the epoch as trained and resume validates it, each
  epoch once in results.csv; with augmentation on (and `cache=ram`, which the launch picks here) the
  run killed, stopped and resumed twice has the uninterrupted run's results and weights exactly;
- with `epochs` above `close_mosaic` (mosaic on through the stop, the loader not reset by Ultralytics
  in the resumed epoch) on two CPU ranks: the resumed epoch's weights and fp32 EMA are the
  uninterrupted run's; a resume with `batch` doubled steps the optimizer by Ultralytics' rule from
  its first batch;
- stock `yolo train resume=True model=last.pt` resumes a checkpoint of the first epoch in the run's
  folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.helpers.containers import Containers
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
    name = f"rig-test-stop-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        subprocess.run(
            ["docker", "compose", "-f", "compose.yaml", "-p", name, "down", "-v", "-t", "5"],
            cwd=REPO,
            capture_output=True,
            timeout=180,
            check=False,
        )


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


def _saved(containers: Containers, c: Any, weights: str) -> dict[str, Any]:
    rc, out = containers.exec(c, ["python", "/tests/checkpoint_epochs.py", weights], 120)
    assert rc == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_sigkill_loses_seconds_and_a_stop_during_validation_keeps_the_epoch(
    containers: Containers, docker_client: Any
) -> None:
    """One CPU rank with 2 workers, augmentation on: RIG_CHECKPOINT_EVERY=5, SIGKILL to the whole
    container once a periodic checkpoint is written; resume=auto continues from it; stopped again
    while it validates (a slow validation pass), and resumed once more: every epoch once, and the
    results and weights of the same run uninterrupted."""
    volume = docker_client.volumes.create(f"rig-test-{uuid.uuid4().hex[:10]}")
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
        epoch, where, _best, saved = _saved(containers, checker, "/runs/detect/k/weights")["last.pt"]
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


def test_stock_ultralytics_resumes_a_checkpoint_of_the_first_epoch_in_the_runs_folder(
    containers: Containers, docker_client: Any
) -> None:
    """One CPU rank, TERM inside the first epoch of 2: the closing line names rig's resume first;
    stock `yolo train resume=True model=last.pt` (the image's own Ultralytics, not rig) resumes that
    checkpoint in the run's folder at epoch 2, as the line says, instead of a new run elsewhere."""
    volume = docker_client.volumes.create(f"rig-test-{uuid.uuid4().hex[:10]}")
    try:
        mounts = {
            volume.name: {"bind": "/runs", "mode": "rw"},
            str(SCRIPTS): {"bind": "/tests", "mode": "ro"},
        }
        c = containers.run(["sleep", "900"], volumes=mounts, environment={"RIG_USER": "root"}, shm_size="1g")
        data = "rig demo-data /runs/demo --train 32 --val 8 --imgsz 32 >/dev/null"
        assert containers.exec(c, data, 300)[0] == 0
        # 16 batches of 2, each 0.5 s longer: a periodic checkpoint every second inside the epoch.
        slow = "PYTHONPATH=/tests/slow_clock RIG_TEST_TRAIN_BATCH_S=0.5 RIG_CHECKPOINT_EVERY=1"
        train = (
            f"{slow} rig train device=cpu workers=2 data=/runs/demo/data.yaml model=/tests/tiny_detect.yaml "
            "epochs=2 imgsz=32 batch=2 plots=False project=/runs/detect name=s"
        )
        run = f"cd /runs && ({train}; echo $? > /runs/rc) > /runs/s.log 2>&1 &"
        assert containers.exec(c, run, 30)[0] == 0
        wrote = "grep -q 'INFO trainer: checkpoint: ' /runs/s.log"  # a batch of the first epoch trained
        wait_until(lambda: containers.exec(c, wrote, 10)[0] == 0, timeout=600, interval=1)
        containers.exec(c, "pkill -TERM -f 'rig.launch.trainer'", 10)
        wait_until(lambda: containers.exec(c, "test -s /runs/rc", 10)[0] == 0, timeout=300, interval=1)
        log = containers.exec(c, "cat /runs/s.log", 10)[1]
        assert containers.exec(c, "cat /runs/rc", 10)[1].strip() == "143", log[-4000:]
        last = "/runs/detect/s/weights/last.pt"
        hint = (
            "continue exactly where it stopped with the same `rig train` command and resume=auto "
            f"(or `rig train resume=True model={last}`); stock Ultralytics' `yolo train resume=True "
            f"model={last}` continues at epoch 2 (the rest of epoch 1 is not trained)"
        )
        assert hint in log, log[-4000:]
        epoch, where, _best, _when = _saved(containers, c, "/runs/detect/s/weights")["last.pt"]
        assert where is not None and where[0] == 0 and 0 < where[1] < where[2] and epoch == 0, where

        rc, out = containers.exec(c, f"cd /runs && yolo train resume=True model={last} 2>&1", 600)
        assert rc == 0 and "not a resumable training checkpoint" not in out, out[-4000:]
        assert f"Resuming training {last} from epoch 2 to 2 total epochs" in out, out[-4000:]
        assert containers.exec(c, "ls /runs/detect", 10)[1].split() == ["s"]  # no new run folder
        rows = containers.exec(c, "tail -n +2 /runs/detect/s/results.csv | cut -d, -f1", 10)[1].split()
        assert [int(float(r)) for r in rows] == [2], out[-3000:]  # the partial epoch writes no row
    finally:
        containers.cleanup()
        volume.remove(force=True)


def _steps(first: int, batches: int, nominal: int, warmup: int, last: int = -1) -> tuple[int, int]:
    """Ultralytics' optimizer steps (BaseTrainer._do_train) over the iterations `first` to `first +
    batches - 1`, from its last step `last` (-1 in every process it starts): accumulate ramps from 1
    to `nominal` (max(round(nbs / batch), 1)) over the `warmup` iterations as np.interp rounds it,
    and a step comes when ni - last >= accumulate. (steps, the last step)."""
    count, accumulate = 0, nominal
    for ni in range(first, first + batches):
        if warmup and ni <= warmup:
            value = nominal if ni == warmup else (nominal - 1) / warmup * ni + 1.0
            accumulate = max(1, round(value))
        if ni - last >= accumulate:
            count, last = count + 1, ni
    return count, last


def _updates(containers: Containers, c: Any, weights: str) -> dict[str, Any]:
    rc, out = containers.exec(c, ["python", "/tests/checkpoint_ema.py", weights], 120)
    assert rc == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_stop_with_mosaic_on_resumes_the_whole_run_and_a_doubled_batch_steps_at_once(
    containers: Containers, docker_client: Any
) -> None:
    """2 CPU ranks with 2 loader workers, epochs=3 above close_mosaic=1: mosaic on through a TERM in
    epoch 2, whose resumed process starts its loader at the stop's batch itself (Ultralytics resets it
    only when mosaic closes). At epoch 2's end the resumed run holds the uninterrupted run's weights and
    EMA, in fp32, bit for bit (the EMA with a time constant of 1 update, so every update before the
    stop still weighs in it). Stopped again in epoch 3 and resumed with `batch` doubled: the epoch runs
    again from its start, and the optimizer steps (the EMA's updates) in each epoch are Ultralytics'
    rule, from its first batch on in the new geometry."""
    volume = docker_client.volumes.create(f"rig-test-{uuid.uuid4().hex[:10]}")
    try:
        mounts = {
            volume.name: {"bind": "/runs", "mode": "rw"},
            str(SCRIPTS): {"bind": "/tests", "mode": "ro"},
        }
        c = containers.run(["sleep", "1200"], volumes=mounts, environment={"RIG_USER": "root"}, shm_size="1g")
        data = "rig demo-data /runs/demo --train 64 --val 16 --imgsz 64 >/dev/null"
        assert containers.exec(c, data, 300)[0] == 0
        # 64 images at batch 4 over 2 ranks: 16 batches of 2 an epoch per rank; nbs 16: a step every
        # 4 batches once the warmup (2 epochs, 32 iterations) has ramped accumulate up to it.
        train = (
            "rig train device=cpu --cpu-ranks 2 workers=2 data=/runs/demo/data.yaml "
            "model=/tests/tiny_detect.yaml epochs=3 close_mosaic=1 imgsz=64 batch=4 nbs=16 cache=ram "
            "save_period=1 plots=False project=/runs/detect"
        )
        ema = "PYTHONPATH=/tests/slow_clock RIG_TEST_EMA_TAU=1"
        rc, whole = containers.exec(c, f"cd /runs && {ema} {train} name=whole 2>&1", 900)
        assert rc == 0, whole[-4000:]
        assert whole.count("Closing dataloader mosaic") == 1, whole[-4000:]  # at epoch 3 only

        # Each batch 0.3 s longer in the run to stop, so that a TERM soon after an epoch's end lands
        # inside the next epoch.
        cut = f"{ema} RIG_TEST_TRAIN_BATCH_S=0.3 {train} name=cut resume=auto"

        def stopped(after: str, args: str = "") -> str:
            run = f"cd /runs && rm -f rc && ({cut} {args}; echo $? > /runs/rc) > /runs/cut.log 2>&1 &"
            assert containers.exec(c, run, 30)[0] == 0
            wait_until(lambda: containers.exec(c, after, 10)[0] == 0, timeout=600, interval=1)
            containers.exec(c, "pkill -TERM -f 'rig.launch.trainer'", 10)
            wait_until(lambda: containers.exec(c, "test -s /runs/rc", 10)[0] == 0, timeout=300, interval=1)
            log = containers.exec(c, "cat /runs/cut.log", 10)[1]
            assert containers.exec(c, "cat /runs/rc", 10)[1].strip() == "143", log[-4000:]
            return log

        log = stopped("test -f /runs/detect/cut/weights/epoch0.pt")
        stop = re.search(r"INFO trainer: stop: \S+ continues at epoch 2/3 at batch (\d+)/16", log)
        assert stop and "Traceback" not in log, log[-4000:]
        log = stopped("test -f /runs/detect/cut/weights/epoch1.pt")
        assert f"continuing /runs/detect/cut/weights/last.pt at epoch 2/3 at batch {stop.group(1)}/16" in log
        second = re.search(r"INFO trainer: stop: \S+ continues at epoch 3/3 at batch (\d+)/16", log)
        assert second and "Traceback" not in log, log[-4000:]

        # Epoch 2 resumed at its stop, mosaic on: the uninterrupted run's epochs and weights.
        columns = "tail -n +2 /runs/detect/{}/results.csv | head -2 | cut -d, -f1,3-"
        ours = containers.exec(c, columns.format("cut"), 10)[1]
        assert ours == containers.exec(c, columns.format("whole"), 10)[1] and ours.count("\n") == 2, ours
        pair = " ".join(f"/runs/detect/{name}/weights/epoch1.pt" for name in ("whole", "cut"))
        rc, out = containers.exec(c, f"python /tests/same_weights.py {pair}", 120)
        assert rc == 0, out
        parts = json.loads(out.strip().splitlines()[-1])
        assert parts["ema"][0] == 0 and parts["rig_resume.model"][0] == 0, parts
        assert _updates(containers, c, "/runs/detect/cut/weights")["epoch1.pt"][1] == "torch.float32"

        # Resumed in epoch 3 with batch 8: 8 batches of 4 per rank, a step every 2 from the first.
        at_stop = _updates(containers, c, "/runs/detect/cut/weights")["last.pt"][0]
        rc, log = containers.exec(c, f"cd /runs && {cut.replace('batch=4 ', 'batch=8 ')} 2>&1", 900)
        assert rc == 0, log[-4000:]
        assert "was saved with 16 batches per rank; this run has 8" in log, log[-4000:]
        totals = {}
        for name in ("whole", "cut"):
            updates = _updates(containers, c, f"/runs/detect/{name}/weights")
            totals[name] = [updates[f"epoch{e}.pt"][0] for e in range(3)]
        steps, last = _steps(0, 16, 4, 32)
        assert totals["whole"][0] == totals["cut"][0] == steps, totals
        steps, last = _steps(16, 16, 4, 32, last)
        assert totals["whole"][1] - totals["whole"][0] == totals["cut"][1] - totals["cut"][0] == steps, totals
        assert totals["whole"][2] - totals["whole"][1] == _steps(32, 16, 4, 32, last)[0], totals
        # The cut run's epoch 3: the steps of its batches before the stop, then the new geometry's.
        done = int(second.group(1)) - 1
        assert at_stop - totals["cut"][1] == _steps(32, done, 4, 32, last)[0], (at_stop, totals, done)
        assert totals["cut"][2] - at_stop == _steps(16, 8, 2, 16)[0] == 4, (at_stop, totals)
    finally:
        containers.cleanup()
        volume.remove(force=True)
