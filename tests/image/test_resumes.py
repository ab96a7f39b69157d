"""Resume on the paths users take beyond test_stops.py's, in the image, with loader workers:

- stock `yolo train resume=True model=last.pt` (the image's own Ultralytics, not rig) resumes a
  checkpoint rig wrote inside the first epoch, in the run's folder;
- with `epochs` above `close_mosaic` (mosaic on through the stop, and a resumed epoch whose loader
  Ultralytics does not reset) on two CPU ranks: the resumed epoch's weights and fp32 EMA are the
  uninterrupted run's; a resume with `batch` doubled steps the optimizer by Ultralytics' rule from
  its first batch.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.helpers import checkpoints, trainbox
from tests.helpers.containers import Containers

pytestmark = [pytest.mark.image, pytest.mark.slow]


def test_stock_ultralytics_resumes_a_checkpoint_of_the_first_epoch_in_the_runs_folder(
    containers: Containers, docker_client: Any
) -> None:
    """One CPU rank, TERM inside the first epoch of 2: the closing line names rig's resume first;
    stock `yolo train resume=True model=last.pt` (the image's own Ultralytics, not rig) resumes that
    checkpoint in the run's folder at epoch 2, as the line says, instead of a new run elsewhere."""
    with trainbox.box(containers, docker_client, images=32, imgsz=32, seconds=900) as c:
        # 16 batches of 2, each 0.5 s longer: a periodic checkpoint every second inside the epoch.
        slow = "PYTHONPATH=/tests/slow_clock RIG_TEST_TRAIN_BATCH_S=0.5 RIG_CHECKPOINT_EVERY=1"
        train = (
            f"{slow} rig train device=cpu workers=2 data=/runs/demo/data.yaml model=/tests/tiny_detect.yaml "
            "epochs=2 imgsz=32 batch=2 plots=False project=/runs/detect name=s"
        )
        wrote = "grep -q 'INFO trainer: checkpoint: ' /runs/s.log"  # a batch of the first epoch trained
        log = trainbox.stopped(containers, c, train, "/runs/s.log", wrote)
        last = "/runs/detect/s/weights/last.pt"
        hint = (
            "continue exactly where it stopped with the same `rig train` command and resume=auto "
            f"(or `rig train resume=True model={last}`); stock Ultralytics' `yolo train resume=True "
            f"model={last}` continues at epoch 2 (the rest of epoch 1 is not trained)"
        )
        assert hint in log, log[-4000:]
        epoch, where, _best, _when = checkpoints.epochs(containers, c, "/runs/detect/s/weights")["last.pt"]
        assert where is not None and where[0] == 0 and 0 < where[1] < where[2] and epoch == 0, where

        rc, out = containers.exec(c, f"cd /runs && yolo train resume=True model={last} 2>&1", 600)
        assert rc == 0 and "not a resumable training checkpoint" not in out, out[-4000:]
        assert f"Resuming training {last} from epoch 2 to 2 total epochs" in out, out[-4000:]
        assert containers.exec(c, "ls /runs/detect", 10)[1].split() == ["s"]  # no new run folder
        rows = containers.exec(c, "tail -n +2 /runs/detect/s/results.csv | cut -d, -f1", 10)[1].split()
        assert [int(float(r)) for r in rows] == [2], out[-3000:]  # the partial epoch writes no row

        # rig's part of every save raising (tests/scripts/rig_part_fails): the periodic checkpoints and
        # the epochs' are Ultralytics' own, written all the same, and the run goes on to its end.
        failing = train.replace(slow, "PYTHONPATH=/tests/rig_part_fails RIG_CHECKPOINT_EVERY=1").replace(
            "name=s", "name=f save_period=1"
        )
        rc, out = containers.exec(c, f"cd /runs && {failing} 2>&1", 600)
        assert rc == 0 and "Traceback" not in out, out[-4000:]
        warned = re.findall(
            r"^WARNING trainer: checkpoint: rig's part of \S+ failed \(AttributeError", out, re.M
        )
        assert len(warned) >= 2, out[-4000:]  # a periodic checkpoint's and an epoch's end
        saved = checkpoints.epochs(containers, c, "/runs/detect/f/weights")
        assert {"last.pt", "epoch0.pt", "epoch1.pt"} <= set(saved), saved
        assert saved["epoch0.pt"][1] is None and saved["epoch1.pt"][1] is None, saved  # Ultralytics' own
        rc, out = containers.exec(c, "cd /runs && yolo val model=/runs/detect/f/weights/last.pt 2>&1", 600)
        assert rc == 0 and "all " in out, out[-3000:]


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
    with trainbox.box(containers, docker_client, images=64, imgsz=64, seconds=1200) as c:
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

        log = trainbox.stopped(
            containers, c, cut, "/runs/cut.log", "test -f /runs/detect/cut/weights/epoch0.pt"
        )
        stop = re.search(r"INFO trainer: stop: \S+ continues at epoch 2/3 at batch (\d+)/16", log)
        assert stop and "Traceback" not in log, log[-4000:]
        log = trainbox.stopped(
            containers, c, cut, "/runs/cut.log", "test -f /runs/detect/cut/weights/epoch1.pt"
        )
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
        assert parts["rig_resume.ema"][0] == 0, parts  # the fp32 EMA training has, beside Ultralytics' fp16
        dtypes = checkpoints.updates(containers, c, "/runs/detect/cut/weights")["epoch1.pt"][1:]
        assert dtypes == ["torch.float16", "torch.float32"], dtypes  # Ultralytics' own key, and rig's

        # Resumed in epoch 3 with batch 8: 8 batches of 4 per rank, a step every 2 from the first.
        at_stop = checkpoints.updates(containers, c, "/runs/detect/cut/weights")["last.pt"][0]
        rc, log = containers.exec(c, f"cd /runs && {cut.replace('batch=4 ', 'batch=8 ')} 2>&1", 900)
        assert rc == 0, log[-4000:]
        assert "was saved with 16 batches per rank; this run has 8" in log, log[-4000:]
        totals = {}
        for name in ("whole", "cut"):
            updates = checkpoints.updates(containers, c, f"/runs/detect/{name}/weights")
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
