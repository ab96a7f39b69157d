"""Short real training runs on a GPU, ours and stock, each timed over the same number of steps after the
same start-up: images/s, the share of step time spent waiting for data, and the GPU's busy share.

Ours is what `rig train` runs: rig's trainer (the node image cache, the device tail), its loader
settings, the batch it picks without batch= and the step levers its decision gives. Stock is
`yolo train` at the same settings: Ultralytics' own trainer, loader settings and default batch.
Steps are timed as telemetry times them (rig.instrument.telemetry.StepTimer); the GPU is sampled by
telemetry's own Recorder (NVML, into a CSV in a scratch folder), and the busy share is the mean of
its samples taken while the measured steps ran.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rig.instrument import telemetry
from rig.instrument.telemetry import StepTimer, StepTotals
from rig.launch import trainer as launch_trainer
from rig.observe.bench.results import BenchOptions, TrainResult, train_result
from rig.yolo import contract, ultra

STARTUP_BATCHES = 3  # the first batches (workers starting, cuDNN autotuning, compiling) are not throughput
SAMPLE_S = 0.1  # NVML read interval while a run is measured
EPOCHS = 1000  # enough epochs for any measured stretch: the run stops itself after its steps


@contextlib.contextmanager
def _environ(changes: Mapping[str, str]) -> Iterator[None]:
    kept = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in kept.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def busy_share(rows: Sequence[Mapping[str, str]], gpu: int, start: float, end: float) -> list[float]:
    """The GPU's utilisation samples (telemetry's CSV rows) taken between start and end (time.time())."""
    column = f"gpu{gpu}_util_pct"
    return [
        float(r[column]) for r in rows if r.get(column) not in (None, "") and start < float(r["time"]) <= end
    ]


def run(
    data_yaml: Path,
    opts: BenchOptions,
    device: Any,
    *,
    stock: bool,
    batch: int,
    settings: Mapping[str, Any],
    steps: int,
    env: Mapping[str, str] | None = None,
) -> TrainResult:
    """One run of `steps` measured steps after STARTUP_BATCHES. settings: Ultralytics' arguments beyond
    the shared ones (the loader's cache and workers, the levers); env: the trainer's variables."""
    timer = StepTimer()
    seen = 0
    window: dict[str, float] = {}
    totals = StepTotals()

    def batch_end(trainer: contract.Trainer) -> None:
        nonlocal seen, totals
        timer.batch_end()
        seen += 1
        if seen == STARTUP_BATCHES:
            timer.drain()
            window["start"] = time.time()
        elif seen == STARTUP_BATCHES + steps:
            window["end"] = time.time()
            totals = timer.drain()
            trainer.stop = True  # the steps are measured: end the run (a short validation follows)

    model = ultra.yolo(opts.model)
    model.add_callback("on_train_epoch_start", lambda _t: timer.epoch_start())
    model.add_callback("on_train_batch_start", lambda _t: timer.batch_start())
    model.add_callback("on_train_batch_end", batch_end)
    base = model.task_map[model.task]["trainer"]
    trainer = base if stock else launch_trainer.rig_trainer_class(base)
    ordinal = device.index or 0
    with tempfile.TemporaryDirectory(prefix="rig-bench-run-") as project:
        recorder = telemetry.Recorder(
            Path(project) / "telemetry", interval_s=SAMPLE_S, writer_factory=lambda _p: None, announce=False
        )
        recorder.start()
        try:
            with _environ(env or {}):
                model.train(
                    trainer=trainer,
                    data=str(data_yaml),
                    epochs=EPOCHS,
                    imgsz=opts.imgsz,
                    batch=batch,
                    amp=opts.amp,
                    val=False,
                    plots=False,
                    save=False,
                    project=project,
                    name="stock" if stock else "ours",
                    exist_ok=True,
                    device=ordinal,
                    verbose=False,
                    **settings,
                )
        finally:
            recorder.stop()
        rows = telemetry.read_csv(Path(project) / "telemetry" / telemetry.CSV_NAME)
    util = busy_share(rows, ordinal, window.get("start", 0.0), window.get("end", 0.0))
    return train_result(totals, batch, util, {"batch": batch, **settings, **(env or {})})


def describe(t: TrainResult) -> str:
    util = "n/a" if t.gpu_util_mean is None else f"{t.gpu_util_mean:.0f}%"
    return f"batch {t.batch}, GPU busy {util}, data wait {t.data_wait_fraction:.0%} over {t.batches} steps"


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
