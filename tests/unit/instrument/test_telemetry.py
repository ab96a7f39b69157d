"""Telemetry on the host: a fake NVML module, a recording TensorBoard writer, fake clocks."""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rig.errors import RigError
from rig.hardware import nvml as nvml_module
from rig.instrument import telemetry

from tests.helpers.waiting import wait_until
from tests.scripts.fake_nvml import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    FakeNvml,
    NVMLError,
)


class RecordingWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.closed = False

    def add_scalar(self, tag: str, value: float, step: int, walltime: float) -> None:
        self.scalars.append((tag, value, step))

    def close(self) -> None:
        self.closed = True


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


@pytest.fixture
def logged() -> Iterator[list[str]]:
    handler = ListHandler()
    logger = logging.getLogger("rig.telemetry")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def two_gpus() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(utils=[10, 30, 50], mem_used=[1 << 30, 3 << 30, 2 << 30]),
            FakeGpu(
                name="NVIDIA H100",
                uuid="GPU-1",
                bus_id="00000000:18:00.0",
                utils=[90],
                mem_used=[5 << 30],
                power_mw=None,
            ),
        ]
    )


def recorder(
    tmp_path: Path, nvml: Any, writer: RecordingWriter | None = None, **kw: Any
) -> telemetry.Recorder:
    # A huge interval: the tests drive sample_once() themselves unless they want the thread.
    kw.setdefault("interval_s", 3600.0)
    return telemetry.Recorder(tmp_path, nvml_module=nvml, writer_factory=lambda _: writer, **kw)


def test_samples_land_in_csv_and_tensorboard(tmp_path: Path) -> None:
    writer, clock = RecordingWriter(), Clock()
    rec = recorder(tmp_path, two_gpus(), writer, clock=clock)
    rec.start()
    for _ in range(3):
        clock.t += 1
        rec.sample_once()
    summary = rec.stop()

    rows = list(csv.DictReader((tmp_path / "telemetry.csv").open()))
    assert len(rows) == 4  # three ticks and the final row written by stop()
    assert [r["gpu0_util_pct"] for r in rows] == ["10.000", "30.000", "50.000", "10.000"]
    assert rows[0]["gpu0_mem_used_mib"] == "1024.000"
    assert rows[0]["gpu0_power_w"] == "300.000"
    assert rows[0]["gpu1_power_w"] == ""  # NotSupported: blank, not an error
    assert rows[0]["gpu1_sm_clock_mhz"] == "1980.000"
    assert [float(r["elapsed_s"]) for r in rows] == [1.0, 2.0, 3.0, 3.0]

    tags = {t for t, _, _ in writer.scalars}
    assert {f"gpu0/{f}" for f in telemetry.GPU_FIELDS} <= tags
    assert "gpu1/power_w" not in tags
    assert ("gpu0/util_pct", 30.0, 1) in writer.scalars
    assert writer.closed

    assert summary is not None
    g0, g1 = summary.gpus
    assert g0.mean_util_pct == pytest.approx((10 + 30 + 50 + 10) / 4)
    assert g0.peak_mem_mib == pytest.approx(3072)
    assert (g1.name, g1.mean_util_pct, g1.mean_power_w) == ("NVIDIA H100", 90.0, None)
    saved = json.loads((tmp_path / "telemetry_summary.json").read_text())
    assert saved["gpus"][0]["peak_mem_mib"] == pytest.approx(3072)
    assert saved["files"] == {
        "csv": "telemetry.csv",
        "summary": "telemetry_summary.json",
        "tensorboard": "telemetry",
    }


def test_summary_is_computed_from_the_csv_rows() -> None:
    names = ("elapsed_s", "steps", "data_wait_s", "step_s", "gpu0_util_pct", "gpu0_mem_used_mib")
    table = [
        ("1", "2", "0.5", "2.0", "40", "100"),
        ("2", "3", "0.5", "3.0", "", ""),  # NVML failed on this tick
        ("3", "0", "0", "0", "80", "300"),
    ]
    rows = [dict(zip(names, values, strict=True)) for values in table]
    s = telemetry.summarize(rows, [telemetry.GpuInfo(0, "H200", "GPU-0")], "ok")
    assert (s.steps, s.samples, s.duration_s) == (5, 3, 3.0)
    assert s.data_wait_share == pytest.approx(1.0 / 5.0)
    assert (s.gpus[0].mean_util_pct, s.gpus[0].peak_mem_mib, s.gpus[0].samples) == (60.0, 300.0, 2)
    assert s.lines() == [
        "GPU 0 (H200): mean utilisation 60.0%, peak memory 300 MiB, data wait 20.0% of step time over 5 steps"
    ]


def test_step_timer_splits_data_wait_from_compute() -> None:
    clock = Clock()
    timer = telemetry.StepTimer(clock)
    timer.epoch_start()
    for wait, compute in ((3.0, 1.0), (0.5, 1.0), (0.5, 2.0)):
        clock.t += wait
        timer.batch_start()
        clock.t += compute
        timer.batch_end()
    totals = timer.drain()
    assert (totals.steps, totals.data_wait_s, totals.step_s) == (3, 4.0, 8.0)
    assert timer.drain().steps == 0  # drained


def six_gpus() -> FakeNvml:
    """A 6-GPU machine: GPU i (NVML's index) sits at bus 0x18+i, is i*10 % busy, named GPU-i.
    NVML lists them out of bus order, as it may; CUDA (PCI_BUS_ID order) numbers them by bus."""
    gpus = [
        FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{0x18 + i:02x}:00.0", utils=[10 * i]) for i in range(6)
    ]
    return FakeNvml(gpus[3:] + gpus[:3])


def sampled(tmp_path: Path, environ: dict[str, str]) -> dict[str, str]:
    """One row of a recorder under environ: {csv column: value} of the GPU columns' util_pct."""
    rec = recorder(tmp_path, six_gpus(), environ=environ)
    rec.start()
    row = rec.sample_once()
    summary = rec.stop()
    assert summary is not None
    assert [g.index for g in summary.gpus] == [int(k[3:-9]) for k in row if k.endswith("_util_pct")]
    return {k: v for k, v in row.items() if k.endswith("_util_pct")}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        # The container's GPUs, numbered by CUDA ordinal (bus order), not by NVML's index.
        ({}, {f"gpu{i}_util_pct": f"{10.0 * i:.3f}" for i in range(6)}),
        # CUDA_VISIBLE_DEVICES=4,5: the run's GPUs are cuda:0 and cuda:1; the four others are not sampled.
        ({"CUDA_VISIBLE_DEVICES": "4,5"}, {"gpu0_util_pct": "40.000", "gpu1_util_pct": "50.000"}),
        ({"CUDA_VISIBLE_DEVICES": "GPU-5,2"}, {"gpu0_util_pct": "50.000", "gpu1_util_pct": "20.000"}),
        # rig train --gpus 0,2: RIG_RUN_GPUS names them, over a rank's own CUDA_VISIBLE_DEVICES.
        (
            {"RIG_RUN_GPUS": "0=0000:18:00.0,2=0000:1a:00.0", "CUDA_VISIBLE_DEVICES": "2"},
            {"gpu0_util_pct": "0.000", "gpu2_util_pct": "20.000"},
        ),
        # --gpus 1 under CUDA_VISIBLE_DEVICES=4,5: the user's GPU 1 is bus 0x1d (NVML's 5).
        ({"RIG_RUN_GPUS": "1=0000:1d:00.0", "CUDA_VISIBLE_DEVICES": "4,5"}, {"gpu1_util_pct": "50.000"}),
    ],
)
def test_the_runs_gpus_are_sampled_as_the_user_numbers_them(
    tmp_path: Path, environ: dict[str, str], expected: dict[str, str]
) -> None:
    assert sampled(tmp_path, environ) == expected


def test_a_cuda_visible_devices_naming_no_gpu_is_one_info_line(tmp_path: Path, logged: list[str]) -> None:
    assert sampled(tmp_path, {"CUDA_VISIBLE_DEVICES": "GPU-nope"}) == {}
    assert len([line for line in logged if "GPU-nope" in line]) == 1
    assert logged[0].startswith("INFO ") and "the run goes on" in logged[0]


def test_run_survives_nvml_errors_mid_run(tmp_path: Path, logged: list[str]) -> None:
    nvml = FakeNvml([FakeGpu(utils=[20, 40])], fail_after=2)
    rec = recorder(tmp_path, nvml, RecordingWriter())
    rec.start()
    for _ in range(5):
        rec.sample_once()
    summary = rec.stop()

    rows = list(csv.DictReader((tmp_path / "telemetry.csv").open()))
    assert len(rows) == 6
    assert [r["gpu0_util_pct"] for r in rows] == ["20.000", "40.000", "", "", "", ""]
    errors = [line for line in logged if "NVML error" in line]
    # The first failure when it happens, their count at the end of the run: never a line per sample.
    assert len(errors) == 2 and errors[0].startswith("INFO NVML error on GPU 0 (util_pct: NVMLError")
    assert errors[0].endswith("; those values stay empty, the run goes on")
    assert errors[1].startswith("INFO telemetry sampling failed 4 times: NVML error on GPU 0 (util_pct: ")
    assert not any(line.startswith(("WARNING", "ERROR")) for line in logged)
    assert summary is not None and summary.gpus[0].mean_util_pct == pytest.approx(30.0)


def test_no_nvml_records_step_timing_only(tmp_path: Path, logged: list[str]) -> None:
    rec = recorder(tmp_path, FakeNvml(init_error=12), RecordingWriter())
    rec.start()
    rec.timer.epoch_start()
    rec.timer.batch_start()
    rec.timer.batch_end()
    summary = rec.stop()

    header = (tmp_path / "telemetry.csv").read_text().splitlines()[0]
    assert header == "time,elapsed_s,steps,data_wait_s,step_s"
    assert summary is not None and summary.gpus == () and summary.steps == 1
    assert [line for line in logged if "NVML unavailable" in line] == [logged[0]]
    assert logged[0].startswith("INFO ") and "the run goes on" in logged[0]
    assert summary.lines()[0].startswith("no GPU sampled; data wait ")
    assert summary.nvml == "NVML unavailable (NVMLError: NVML error 12)"


def test_missing_pynvml_is_one_info_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pynvml() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_module, "_import_pynvml", no_pynvml)
    nvml, why = nvml_module.Nvml.open()
    assert nvml is None and "No module named 'pynvml'" in why


def test_not_supported_fields_are_silent(tmp_path: Path, logged: list[str]) -> None:
    rec = recorder(tmp_path, FakeNvml([FakeGpu(power_mw=None)]), RecordingWriter())
    rec.start()
    rec.sample_once()
    rec.stop()
    assert NVML_ERROR_NOT_SUPPORTED == 3
    assert not [line for line in logged if "NVML error" in line]


def test_sampler_thread_samples_every_interval(tmp_path: Path) -> None:
    writer = RecordingWriter()
    rec = telemetry.Recorder(
        tmp_path, nvml_module=two_gpus(), writer_factory=lambda _: writer, interval_s=0.02
    )
    rec.start()
    wait_until(lambda: sum(t == "gpu1/util_pct" for t, _, _ in writer.scalars) >= 3, timeout=10)
    summary = rec.stop()
    assert summary is not None and summary.samples >= 4
    assert rec.stop() is summary  # idempotent


class FakeModel:
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Any]] = {}

    def add_callback(self, event: str, fn: Any) -> None:
        self.callbacks.setdefault(event, []).append(fn)

    def fire(self, event: str, trainer: Any) -> None:
        for fn in self.callbacks.get(event, []):
            fn(trainer)


def test_attach_times_steps_through_ultralytics_callbacks(tmp_path: Path, logged: list[str]) -> None:
    model, clock = FakeModel(), Clock()
    rec = telemetry.attach(model, nvml_module=FakeNvml(), writer_factory=lambda _: None, interval_s=3600.0)
    rec.timer.clock = clock
    trainer = SimpleNamespace(save_dir=tmp_path / "runs" / "train")
    model.fire("on_train_start", trainer)
    model.fire("on_train_epoch_start", trainer)
    for _ in range(4):
        clock.t += 1.0  # waiting for the loader
        model.fire("on_train_batch_start", trainer)
        clock.t += 3.0  # forward, backward, optimizer
        model.fire("on_train_batch_end", trainer)
    model.fire("on_train_end", trainer)
    model.fire("teardown", trainer)  # Ultralytics runs it after on_train_end: must be harmless

    saved = json.loads((trainer.save_dir / "telemetry_summary.json").read_text())
    assert saved["steps"] == 4 and saved["data_wait_share"] == pytest.approx(0.25)
    assert "files" in saved and "tensorboard" not in saved["files"]  # no writer: no TensorBoard claim
    summary_lines = [line for line in logged if line.startswith("INFO GPU 0")]
    assert summary_lines == [
        "INFO GPU 0 (NVIDIA H200): mean utilisation 50.0%, peak memory 1024 MiB, "
        "data wait 25.0% of step time over 4 steps"
    ]


def test_record_context_manager(tmp_path: Path) -> None:
    with telemetry.record(tmp_path / "run", nvml_module=FakeNvml(), writer_factory=lambda _: None) as rec:
        rec.sample_once()
    assert rec.summary is not None and rec.summary.gpus[0].samples == 2
    assert (tmp_path / "run" / "telemetry.csv").exists()


def test_attach_rejects_what_is_not_a_model() -> None:
    with pytest.raises(RigError, match="needs an Ultralytics model or trainer, got str"):
        telemetry.attach("yolo11n.pt")


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, 1.0), ({"RIG_TELEMETRY_INTERVAL": "0.5"}, 0.5), ({"RIG_TELEMETRY_INTERVAL": ""}, 1.0)],
)
def test_interval_from_env(env: dict[str, str], expected: float) -> None:
    assert telemetry.interval_from_env(env) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "fast", "nan", "inf"])
def test_bad_interval_is_one_clear_error(raw: str) -> None:
    with pytest.raises(RigError, match="RIG_TELEMETRY_INTERVAL"):
        telemetry.interval_from_env({"RIG_TELEMETRY_INTERVAL": raw})


@pytest.mark.parametrize(
    ("raw", "on"), [("", True), ("1", True), ("0", False), ("off", False), ("false", False)]
)
def test_enabled_from_env(raw: str, on: bool) -> None:
    env = {"RIG_TELEMETRY": raw} if raw else {}
    assert telemetry.enabled_from_env(env) is on


def test_rig_telemetry_0_turns_attach_off(monkeypatch: pytest.MonkeyPatch, logged: list[str]) -> None:
    monkeypatch.setenv("RIG_TELEMETRY", "0")
    model = FakeModel()
    telemetry.attach(model, nvml_module=FakeNvml())
    assert model.callbacks == {}
    assert logged == ["INFO telemetry is off (RIG_TELEMETRY=0)"]


def test_attach_follows_each_training_runs_save_dir(tmp_path: Path) -> None:
    model = FakeModel()
    telemetry.attach(model, nvml_module=FakeNvml(), writer_factory=lambda _: None, interval_s=3600.0)
    for name in ("train", "train2"):  # model.train() twice: Ultralytics picks a new save_dir each time
        trainer = SimpleNamespace(save_dir=tmp_path / name)
        for event in ("on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end"):
            model.fire(event, trainer)
        model.fire("on_train_end", trainer)
    for name in ("train", "train2"):
        saved = json.loads((tmp_path / name / "telemetry_summary.json").read_text())
        assert saved["steps"] == 1


def test_an_unwritable_run_directory_does_not_stop_training(tmp_path: Path, logged: list[str]) -> None:
    (tmp_path / "file").write_text("")
    model = FakeModel()
    telemetry.attach(model, tmp_path / "file" / "run", nvml_module=FakeNvml(), writer_factory=lambda _: None)
    trainer = SimpleNamespace(save_dir=tmp_path)
    for event in ("on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end"):
        model.fire(event, trainer)
    model.fire("on_train_end", trainer)
    assert len(logged) == 1 and logged[0].startswith("INFO telemetry off for this run (")


# ---- a sampler that raises: the NVML errors meant are handled, anything else shows -----------------
def test_nvml_unable_to_list_the_gpus_is_step_timing_only(tmp_path: Path, logged: list[str]) -> None:
    nvml = FakeNvml().failing("nvmlDeviceGetCount", NVMLError(NVML_ERROR_GPU_IS_LOST))
    rec = recorder(tmp_path, nvml, RecordingWriter())
    rec.start()
    summary = rec.stop()
    assert summary is not None and summary.gpus == ()
    assert summary.nvml == "NVML could not list GPUs (NVMLError: NVML error 15)"
    assert logged[0] == (
        "INFO NVML could not list GPUs (NVMLError: NVML error 15): "
        "recording step timing only, the run goes on"
    )


def test_a_bug_listing_the_gpus_is_not_taken_for_nvml(tmp_path: Path) -> None:
    rec = recorder(tmp_path, FakeNvml().failing("nvmlDeviceGetCount", TypeError("a bug")), RecordingWriter())
    with pytest.raises(TypeError, match="a bug"):
        rec.start()  # on_train_start turns telemetry off with one line (below), naming it


def test_a_gpu_whose_handle_is_lost_samples_empty_values(tmp_path: Path, logged: list[str]) -> None:
    nvml = FakeNvml().failing("nvmlDeviceGetHandleByIndex", NVMLError(NVML_ERROR_GPU_IS_LOST), after=1)
    rec = recorder(tmp_path, nvml, RecordingWriter())
    rec.start()  # gpus() takes the one handle
    rec._nvml._handles.clear()  # type: ignore[union-attr]  # as after a driver reload: asked again
    row = rec.sample_once()
    rec.sample_once()
    rec.stop()
    assert row["gpu0_util_pct"] == ""
    assert logged[-3:-1] == [
        "INFO NVML error on GPU 0 (NVMLError: NVML error 15); those values stay empty, the run goes on",
        "INFO telemetry sampling failed 3 times: NVML error on GPU 0 (NVMLError: NVML error 15)",
    ]


def test_a_bug_reading_a_gpu_is_not_taken_for_nvml(tmp_path: Path) -> None:
    nvml = FakeNvml().failing("nvmlDeviceGetHandleByIndex", KeyError("a bug"), after=1)
    rec = recorder(tmp_path, nvml, RecordingWriter())
    rec.start()
    rec._nvml._handles.clear()  # type: ignore[union-attr]
    with pytest.raises(KeyError, match="a bug"):
        rec.sample_once()


class FullDisk(RecordingWriter):
    def add_scalar(self, tag: str, value: float, step: int, walltime: float) -> None:
        raise OSError(28, "No space left on device")


def test_a_sampler_thread_that_fails_is_counted_and_said_once(tmp_path: Path, logged: list[str]) -> None:
    rec = telemetry.Recorder(
        tmp_path, nvml_module=FakeNvml(), writer_factory=lambda _: FullDisk(), interval_s=0.01
    )
    rec.start()
    wait_until(lambda: rec._failures.count >= 3, timeout=30, interval=0.01)
    summary = rec.stop()  # its last sample fails too: counted, and the summary is written
    assert summary is not None and (tmp_path / telemetry.SUMMARY_NAME).is_file()
    failed = [line for line in logged if "No space left" in line]
    assert failed[0] == (
        "INFO telemetry sample failed (OSError: [Errno 28] No space left on device); "
        "those values stay empty, the run goes on"
    )
    count = int(failed[1].split(" failed ")[1].split()[0])
    assert count >= 3 and failed[1:] == [
        f"INFO telemetry sampling failed {count} times: telemetry sample failed "
        "(OSError: [Errno 28] No space left on device)"
    ]


def test_telemetry_that_cannot_start_or_end_never_ends_training(tmp_path: Path, logged: list[str]) -> None:
    model = FakeModel()
    telemetry.attach(
        model, tmp_path / "run", nvml_module=FakeNvml().failing("nvmlDeviceGetCount", TypeError("a bug"))
    )
    trainer = SimpleNamespace(save_dir=tmp_path)
    for event in ("on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end"):
        model.fire(event, trainer)
    model.fire("on_train_end", trainer)
    assert logged == ["INFO telemetry off for this run (TypeError: a bug); the run goes on"]

    logged.clear()
    model = FakeModel()
    rec = telemetry.attach(model, tmp_path / "run2", nvml_module=FakeNvml(), writer_factory=lambda _: None)
    model.fire("on_train_start", trainer)
    (tmp_path / "run2" / telemetry.CSV_NAME).unlink()  # the run directory emptied under the run
    model.fire("on_train_end", trainer)
    assert len(logged) == 1 and logged[0].startswith(
        "INFO telemetry summary not written (FileNotFoundError: "
    )
    assert rec.summary is None
