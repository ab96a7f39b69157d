"""GPU telemetry for every training run: what the GPUs did, and how long each step waited for data.

A background thread reads NVML once per interval for the run's GPUs and appends one row to
`telemetry.csv` in the run directory, plus TensorBoard scalars under `<run>/telemetry/`. The run's
GPUs are numbered as the user numbers them, never by NVML's index (which counts every GPU of the
machine): under `rig train`, RIG_RUN_GPUS names each GPU of the run by its number in the container
and its bus id; elsewhere, the GPUs CUDA_VISIBLE_DEVICES exposes, by CUDA ordinal. Ultralytics
callbacks time each training step: the gap between one batch's end and the next batch's start is
time spent waiting for the loader. At the end the summary (`telemetry_summary.json`, one INFO line
per GPU) is computed from the CSV, so the file and the summary never disagree.

Telemetry never stops a run: no NVML, no GPU or an NVML error mid-run costs one INFO line, and
failures mid-run their count at the end (rig.instrument.failures).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rig import envnumbers, flags, log, rankenv
from rig.errors import RigError
from rig.hardware.nvml import GPU_FIELDS, GpuInfo, Nvml, describe_error
from rig.hardware.topology import apply_visible_devices, normalize_bus_id
from rig.instrument.failures import Failures
from rig.yolo import contract

LOG = log.get("telemetry")

CSV_NAME = "telemetry.csv"
SUMMARY_NAME = "telemetry_summary.json"
TENSORBOARD_DIR = "telemetry"
DEFAULT_INTERVAL_S = 1.0

# Per-GPU columns, in CSV order (nvml.GPU_FIELDS); the CSV names them gpu<index>_<field>.
STEP_FIELDS: tuple[str, ...] = ("time", "elapsed_s", "steps", "data_wait_s", "step_s")


INTERVAL = envnumbers.Number(
    "RIG_TELEMETRY_INTERVAL",
    low=0,
    default=DEFAULT_INTERVAL_S,
    unit="seconds",
    above=True,
    hint="unset it or use e.g. 1",
)


def interval_from_env(environ: Mapping[str, str]) -> float:
    return INTERVAL.read(environ)


def enabled_from_env(environ: Mapping[str, str]) -> bool:
    return flags.switched_on(environ, "RIG_TELEMETRY")


# --------------------------------------------------------------------------------------- step timing
@dataclass
class StepTotals:
    steps: int = 0
    data_wait_s: float = 0.0
    step_s: float = 0.0


class StepTimer:
    """Ultralytics callbacks feed it from the training thread; the sampler drains it every interval.

    A step is from the end of the previous batch (or the epoch's start) to the end of this batch; its
    data wait is the part before `on_train_batch_start`, i.e. inside the loader's `next()`.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._pending = StepTotals()
        self._mark: float | None = None
        self._wait = 0.0

    def epoch_start(self) -> None:
        self._mark = self.clock()

    def batch_start(self) -> None:
        now = self.clock()
        self._wait = now - self._mark if self._mark is not None else 0.0
        if self._mark is None:
            self._mark = now

    def batch_end(self) -> None:
        now = self.clock()
        if self._mark is None:
            return
        with self._lock:
            self._pending.steps += 1
            self._pending.data_wait_s += self._wait
            self._pending.step_s += now - self._mark
        self._mark = now

    def drain(self) -> StepTotals:
        with self._lock:
            out, self._pending = self._pending, StepTotals()
        return out


# ----------------------------------------------------------------------------------- the run's GPUs
def run_gpus(listed: Sequence[tuple[GpuInfo, str]], environ: Mapping[str, str]) -> list[tuple[int, GpuInfo]]:
    """The run's GPUs among NVML's (each with its bus id), with the number the user knows each by.

    rig.rankenv's run GPUs (set by `rig train`) win; otherwise the GPUs CUDA_VISIBLE_DEVICES exposes, by
    CUDA ordinal (rig sets CUDA_DEVICE_ORDER=PCI_BUS_ID: ordinals follow bus order). Raises
    RigError for a CUDA_VISIBLE_DEVICES entry that names no GPU."""
    by_bus = {bus: gpu for gpu, bus in listed}
    named = rankenv.run_gpus(environ)
    if named is not None:
        return [(number, by_bus[bus]) for number, bus in named if bus in by_bus]
    buses = sorted(by_bus)
    visible = apply_visible_devices(
        buses, environ.get("CUDA_VISIBLE_DEVICES"), {b: by_bus[b].uuid for b in buses}
    )
    return [(ordinal, by_bus[bus]) for ordinal, bus in enumerate(visible)]


def nvml_run_gpus(lib: Nvml, environ: Mapping[str, str]) -> list[tuple[int, GpuInfo]]:
    """run_gpus() of what NVML lists; NVML's errors propagate."""
    return run_gpus([(g, normalize_bus_id(lib.pci_bus_id(g.index))) for g in lib.gpus()], environ)


# -------------------------------------------------------------------------------------------- summary
@dataclass(frozen=True)
class GpuSummary:
    index: int
    name: str
    uuid: str
    samples: int
    mean_util_pct: float | None
    peak_mem_mib: float | None
    mean_power_w: float | None
    max_temp_c: float | None


@dataclass(frozen=True)
class Summary:
    duration_s: float
    samples: int
    steps: int
    data_wait_share: float | None
    gpus: tuple[GpuSummary, ...]
    nvml: str
    files: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        wait = (
            f"data wait {self.data_wait_share:.1%} of step time over {self.steps} steps"
            if self.data_wait_share is not None
            else "no training steps timed"
        )
        if not self.gpus:
            return [f"no GPU sampled; {wait}"]
        out = []
        for g in self.gpus:
            util = "n/a" if g.mean_util_pct is None else f"{g.mean_util_pct:.1f}%"
            mem = "n/a" if g.peak_mem_mib is None else f"{g.peak_mem_mib:.0f} MiB"
            out.append(f"GPU {g.index} ({g.name}): mean utilisation {util}, peak memory {mem}, {wait}")
        return out


def summarize(rows: Sequence[Mapping[str, str]], gpus: Sequence[GpuInfo], nvml: str) -> Summary:
    """The run's summary, computed from the CSV rows alone (plus the GPUs' names)."""

    def column(name: str) -> list[float]:
        return [float(r[name]) for r in rows if r.get(name) not in (None, "")]

    wait, step = sum(column("data_wait_s")), sum(column("step_s"))
    elapsed = column("elapsed_s")
    summaries = []
    for g in gpus:
        util, mem = column(f"gpu{g.index}_util_pct"), column(f"gpu{g.index}_mem_used_mib")
        power, temp = column(f"gpu{g.index}_power_w"), column(f"gpu{g.index}_temp_c")
        summaries.append(
            GpuSummary(
                index=g.index,
                name=g.name,
                uuid=g.uuid,
                samples=len(util),
                mean_util_pct=sum(util) / len(util) if util else None,
                peak_mem_mib=max(mem) if mem else None,
                mean_power_w=sum(power) / len(power) if power else None,
                max_temp_c=max(temp) if temp else None,
            )
        )
    return Summary(
        duration_s=max(elapsed) if elapsed else 0.0,
        samples=len(rows),
        steps=int(sum(column("steps"))),
        data_wait_share=wait / step if step > 0 else None,
        gpus=tuple(summaries),
        nvml=nvml,
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------- TensorBoard
class ScalarWriter(Protocol):
    def add_scalar(self, tag: str, value: float, step: int, walltime: float) -> None: ...
    def close(self) -> None: ...


class _EventWriter:
    """TensorBoard's own event-file writer: no torch needed, and what torch's SummaryWriter wraps."""

    def __init__(self, logdir: Path) -> None:
        proto: Any = importlib.import_module("tensorboard.compat.proto.event_pb2")
        summary: Any = importlib.import_module("tensorboard.compat.proto.summary_pb2")
        writer: Any = importlib.import_module("tensorboard.summary.writer.event_file_writer")
        self._event, self._summary = proto.Event, summary.Summary
        self._writer = writer.EventFileWriter(str(logdir), flush_secs=10)

    def add_scalar(self, tag: str, value: float, step: int, walltime: float) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=value)])
        self._writer.add_event(self._event(wall_time=walltime, step=step, summary=summary))

    def close(self) -> None:
        self._writer.close()


def tensorboard_writer(logdir: Path) -> ScalarWriter | None:
    try:
        return _EventWriter(logdir)
    except ImportError:
        return None


# ------------------------------------------------------------------------------------------ recorder
class Recorder:
    """Samples NVML on a thread into the CSV and TensorBoard; times steps through `timer`."""

    def __init__(
        self,
        run_dir: Path | str | None = None,
        *,
        interval_s: float | None = None,
        nvml_module: Any | None = None,
        writer_factory: Callable[[Path], ScalarWriter | None] = tensorboard_writer,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        announce: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._announce = announce  # the summary's INFO lines at stop (`rig bench` reads the CSV instead)
        self._fixed_dir = run_dir is not None  # else each training run uses its trainer's save_dir
        self._environ = os.environ if environ is None else environ
        self.interval_s = interval_s if interval_s is not None else interval_from_env(self._environ)
        self.timer = StepTimer()
        self.summary: Summary | None = None
        self._nvml_module = nvml_module
        self._writer_factory = writer_factory
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Nvml | None = None
        self._nvml_state = "not started"
        self._gpus: list[GpuInfo] = []  # index: the GPU's number as the user knows it
        self._nvml_index: dict[int, int] = {}  # that number -> NVML's index
        self._writer: ScalarWriter | None = None
        self._csv_file: Any = None
        self._csv: Any = None
        self._t0 = 0.0
        self._row = 0
        self._failures = Failures("telemetry sampling", LOG, "those values stay empty, the run goes on")

    @property
    def started(self) -> bool:
        return self._csv is not None

    def start(self, run_dir: Path | str | None = None) -> None:
        if self.started:
            return
        if run_dir is not None:
            self.run_dir = Path(run_dir)
        if self.run_dir is None:
            raise RigError("telemetry needs a run directory: pass run_dir to attach() or record()")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.summary, self._row = None, 0
        self._nvml, self._nvml_state = Nvml.open(self._nvml_module)
        self._gpus, self._nvml_index = [], {}
        if self._nvml is not None:
            try:
                chosen = nvml_run_gpus(self._nvml, self._environ)
            except RigError as e:  # a CUDA_VISIBLE_DEVICES entry NVML cannot match
                self._nvml_state = f"cannot tell this run's GPUs ({e})"
                chosen = []
            except self._nvml.error as e:  # a GPU lost, a driver reloaded
                self._nvml_state = f"NVML could not list GPUs ({describe_error(e)})"
                chosen = []
            self._gpus = [GpuInfo(number, g.name, g.uuid) for number, g in chosen]
            self._nvml_index = {number: g.index for number, g in chosen}
            if not self._gpus and self._nvml_state == "ok":
                self._nvml_state = "NVML sees none of this run's GPUs"
        if not self._gpus:
            LOG.info("%s: recording step timing only, the run goes on", self._nvml_state)
        self._writer = self._writer_factory(self.run_dir / TENSORBOARD_DIR)
        header = list(STEP_FIELDS) + [f"gpu{g.index}_{f}" for g in self._gpus for f in GPU_FIELDS]
        self._csv_file = (self.run_dir / CSV_NAME).open("w", newline="")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=header, lineterminator="\n")
        self._csv.writeheader()
        self._t0 = self._clock()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rig-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        ticks = 0
        while True:
            ticks += 1
            # Deadlines from the start, so a slow NVML read does not make the interval drift.
            delay = self._t0 + ticks * self.interval_s - self._clock()
            if self._stop.wait(max(0.0, delay)):
                return
            self._sample()

    def _sample(self) -> None:
        """sample_once for the sampler's thread and the last row: a failure is counted, never raised."""
        try:
            self.sample_once()
        except Exception as e:  # the sampler must never take the run down: counted, said (Failures)
            self._failures.add(f"telemetry sample failed ({describe_error(e)})")

    def sample_once(self) -> dict[str, str]:
        """Read every GPU and the step timer once; write the CSV row and the TensorBoard scalars."""
        with self._lock:
            if self._csv is None:
                return {}
            now = self._clock()
            totals = self.timer.drain()
            row: dict[str, str] = {
                "time": f"{now:.3f}",
                "elapsed_s": f"{now - self._t0:.3f}",
                "steps": str(totals.steps),
                "data_wait_s": f"{totals.data_wait_s:.6f}",
                "step_s": f"{totals.step_s:.6f}",
            }
            scalars: dict[str, float] = {}
            if totals.step_s > 0:
                scalars["train/data_wait_share"] = totals.data_wait_s / totals.step_s
            for g in self._gpus:
                values, errors = self._read(self._nvml_index[g.index])
                if errors:
                    self._failures.add(f"NVML error on GPU {g.index} ({'; '.join(errors)})")
                for name, value in values.items():
                    row[f"gpu{g.index}_{name}"] = "" if value is None else f"{value:.3f}"
                    if value is not None:
                        scalars[f"gpu{g.index}/{name}"] = value
            self._csv.writerow(row)
            self._csv_file.flush()
            if self._writer is not None:
                for tag, value in scalars.items():
                    self._writer.add_scalar(tag, value, self._row, now)
            self._row += 1
            return row

    def _read(self, index: int) -> tuple[dict[str, float | None], list[str]]:
        assert self._nvml is not None
        try:
            return self._nvml.read(index)
        except self._nvml.error as e:  # its handle: a GPU lost
            return dict.fromkeys(GPU_FIELDS), [describe_error(e)]

    def stop(self) -> Summary | None:
        """Stop sampling, write the last row and the summary; safe to call twice."""
        if not self.started:
            return self.summary
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval_s))
        self._sample()  # the steps since the last tick
        self._failures.report()
        with self._lock:
            self._csv_file.close()
            self._csv = None
            if self._writer is not None:
                with contextlib.suppress(Exception):
                    self._writer.close()
            if self._nvml is not None:
                self._nvml.close()
        assert self.run_dir is not None
        summary = summarize(read_csv(self.run_dir / CSV_NAME), self._gpus, self._nvml_state)
        files = {"csv": CSV_NAME, "summary": SUMMARY_NAME}
        if self._writer is not None:
            files["tensorboard"] = TENSORBOARD_DIR
        self.summary = dataclasses.replace(summary, files=files)
        (self.run_dir / SUMMARY_NAME).write_text(json.dumps(asdict(self.summary), indent=2) + "\n")
        for line in self.summary.lines() if self._announce else ():
            LOG.info("%s", line)
        return self.summary

    # Ultralytics callbacks: each receives the trainer. A telemetry failure must not end the training.
    def on_train_start(self, trainer: contract.Trainer) -> None:
        try:
            self.start(self.run_dir if self._fixed_dir else trainer.save_dir)
        except Exception as e:  # an unwritable run directory, a full disk...
            LOG.info("telemetry off for this run (%s); the run goes on", describe_error(e))

    def on_train_epoch_start(self, trainer: contract.Trainer) -> None:
        self.timer.epoch_start()

    def on_train_batch_start(self, trainer: contract.Trainer) -> None:
        self.timer.batch_start()

    def on_train_batch_end(self, trainer: contract.Trainer) -> None:
        self.timer.batch_end()

    def on_train_end(self, trainer: contract.Trainer) -> None:
        try:
            self.stop()
        except Exception as e:
            LOG.info("telemetry summary not written (%s)", describe_error(e))

    def callbacks(self) -> dict[str, Callable[[Any], None]]:
        return {
            "on_train_start": self.on_train_start,
            "on_train_epoch_start": self.on_train_epoch_start,
            "on_train_batch_start": self.on_train_batch_start,
            "on_train_batch_end": self.on_train_batch_end,
            "on_train_end": self.on_train_end,
            # Ultralytics runs `teardown` however training ends, so a crashed run still gets its summary.
            "teardown": self.on_train_end,
        }


def attach(
    model_or_trainer: contract.Callbacks, run_dir: Path | str | None = None, **kwargs: Any
) -> Recorder:
    """Record telemetry for the next `train()` of an Ultralytics model (or a trainer).

    Without run_dir the trainer's save_dir (e.g. runs/detect/train-3) is used.
    """
    log.setup()
    add = getattr(model_or_trainer, "add_callback", None)  # a wrong object is a line, not a traceback
    if not callable(add):
        raise RigError(
            f"telemetry.attach() needs an Ultralytics model or trainer, got {type(model_or_trainer).__name__}"
        )
    recorder = Recorder(run_dir, **kwargs)
    if not enabled_from_env(os.environ):
        LOG.info("telemetry is off (RIG_TELEMETRY=%s)", os.environ.get("RIG_TELEMETRY"))
        return recorder
    for event, callback in recorder.callbacks().items():
        add(event, callback)
    return recorder


@contextlib.contextmanager
def record(run_dir: Path | str, model: Any | None = None, **kwargs: Any) -> Iterator[Recorder]:
    """Sample the GPUs for the duration of the block; with `model`, also time its training steps."""
    log.setup()
    recorder = attach(model, run_dir, **kwargs) if model is not None else Recorder(run_dir, **kwargs)
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()
