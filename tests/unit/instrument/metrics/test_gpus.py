"""rig.instrument.metrics.gpus: dcgm-exporter's names, units and labels from NVML (the fake module)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from rig.instrument.metrics import gpus

from tests.helpers.metrics import A100, H200, promtool, samples
from tests.scripts.fake_nvml import NVML_ERROR_GPU_IS_LOST, FakeNvml, NVMLError


# ---------------------------------------------------------------------------------------- the GPUs
def gpu_text(module: FakeNvml, env: dict[str, str]) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    collector = gpus.GpuCollector.open(env, module)
    assert collector is not None
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return str(generate_latest(registry).decode())
    finally:
        collector.close()


def test_gpu_gauges_have_dcgm_exporters_names_units_and_labels() -> None:
    env = {"RIG_RUN_GPUS": "0=0000:17:00.0,1=0000:18:00.0", "NODE_NAME": "node-7"}
    text = gpu_text(FakeNvml([H200, A100]), env)
    labels = {"gpu": "0", "UUID": "GPU-abc", "pci_bus_id": "00000000:17:00.0", "device": "nvidia3",
              "modelName": "NVIDIA H200", "Hostname": "node-7"}  # fmt: skip
    got = {n: v for (n, ls), v in samples(text).items() if dict(ls) == labels}
    assert got == {
        "DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 3072, "DCGM_FI_DEV_FB_FREE": 141 * 1024 - 3072,
        "DCGM_FI_DEV_POWER_USAGE": 300, "DCGM_FI_DEV_GPU_TEMP": 40, "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 3201,
        # GPM, between the collector's first sample and this scrape's: ratios, rig's names.
        "rig_gpu_sm_active_ratio": 0.75, "rig_gpu_tensor_active_ratio": 0.4,
        "rig_gpu_dram_active_ratio": 0.125,
    }  # fmt: skip
    a100 = {n for (n, ls), _ in samples(text).items() if dict(ls).get("gpu") == "1"}
    assert "DCGM_FI_DEV_GPU_UTIL" in a100
    assert "DCGM_FI_DEV_POWER_USAGE" not in a100  # NotSupported: no sample rather than a made-up 0
    assert not any(n.startswith("rig_gpu_") for n in a100)  # no GPM before Hopper
    assert "DCGM_FI_PROF" not in text


def test_gpm_samples_are_freed() -> None:
    module = FakeNvml([H200])
    for _ in range(3):
        gpu_text(module, {})
    assert module.gpm_samples == 0


def test_only_the_runs_gpus_and_the_slurm_job() -> None:
    text = gpu_text(FakeNvml([H200, A100]), {"RIG_RUN_GPUS": "1=0000:18:00.0", "SLURM_JOB_ID": "4242"})
    gpus_seen = {dict(ls)["gpu"] for (n, ls), _ in samples(text).items() if n == "DCGM_FI_DEV_GPU_UTIL"}
    assert gpus_seen == {"1"}
    assert {dict(ls).get("hpc_job") for (n, ls), _ in samples(text).items()} == {"4242"}
    # promtool finds dcgm-exporter's own camelCase label (modelName) and nothing else.
    problems = {line.split(" ", 1)[1] for line in promtool(text).splitlines()}
    assert problems == {"label names should be written in 'snake_case' not 'camelCase'"}


@pytest.mark.parametrize("module", [FakeNvml(init_error=9), FakeNvml([])])
def test_no_gpu_no_series_no_error(module: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rig"):
        assert gpus.GpuCollector.open({}, module) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_gpu_lost_mid_run_drops_the_gpu_series_not_the_scrape() -> None:
    collector = gpus.GpuCollector.open({}, FakeNvml([H200], fail_after=0))
    assert collector is not None
    assert list(collector.collect()) == []
    collector.close()


# ---- a sampler that raises: the NVML errors meant are handled and counted, anything else shows -----
LOST = NVMLError(NVML_ERROR_GPU_IS_LOST)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """rig's metrics lines, as they are logged."""
    handler, logger = Lines(), logging.getLogger("rig.metrics")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def scraped(module: FakeNvml, scrapes: int = 1) -> list[set[str]]:
    """The series names of each scrape; the collector closed after them."""
    collector = gpus.GpuCollector.open({}, module)
    assert collector is not None
    try:
        return [{fam.name for fam in collector.collect()} for _ in range(scrapes)]
    finally:
        collector.close()


def test_gpm_that_cannot_sample_here_leaves_its_series_out(logged: list[str]) -> None:
    (names,) = scraped(FakeNvml([H200]).failing("nvmlGpmSampleGet", NVMLError(4)))  # NoPermission
    assert "DCGM_FI_DEV_GPU_UTIL" in names and not {n for n in names if n.startswith("rig_gpu_")}
    assert logged == []  # a GPU without GPM here, not a failure


def test_a_minor_number_nvml_does_not_give_is_the_runs_number() -> None:
    text = gpu_text(FakeNvml([H200]).failing("nvmlDeviceGetMinorNumber", NVMLError(3)), {})
    assert {dict(ls)["device"] for (n, ls), _ in samples(text).items()} == {"nvidia0"}


@pytest.mark.parametrize(
    ("module", "env", "why"),
    [
        (FakeNvml([H200]).failing("nvmlDeviceGetPciInfo", LOST), {}, "NVMLError: NVML error 15"),
        (FakeNvml([H200]), {"CUDA_VISIBLE_DEVICES": "GPU-nope"}, "GPU-nope"),
    ],
)
def test_gpus_nvml_cannot_name_are_one_line_and_no_series(
    module: FakeNvml, env: dict[str, str], why: str, logged: list[str]
) -> None:
    assert gpus.GpuCollector.open(env, module) is None
    assert len(logged) == 1 and logged[0].startswith("no GPU series on /metrics (") and why in logged[0]


@pytest.mark.parametrize(
    "function",
    [
        "nvmlGpmSampleGet",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo",
        "nvmlGpmMetricsGet",
    ],
)
def test_a_bug_in_a_read_is_never_taken_for_an_nvml_error(function: str) -> None:
    module = FakeNvml([H200]).failing(function, TypeError("a bug"))
    with pytest.raises(TypeError, match="a bug"):
        scraped(module)


def test_failed_reads_leave_their_series_out_counted_and_said_twice(logged: list[str]) -> None:
    # From the third scrape on, free memory (two calls a scrape) and GPM (one at the open, one a scrape) fail.
    module = FakeNvml([H200]).failing("nvmlDeviceGetMemoryInfo", LOST, after=4)
    module.failing("nvmlGpmSampleGet", LOST, after=3)
    first, second, third, fourth = scraped(module, 4)
    assert first == second and {"DCGM_FI_DEV_FB_FREE", "rig_gpu_sm_active_ratio"} <= first
    assert third == fourth and not {"DCGM_FI_DEV_FB_FREE", "rig_gpu_sm_active_ratio"} & third
    assert "DCGM_FI_DEV_SM_CLOCK" in third  # the rest of the GPU still answers
    assert module.gpm_samples == 0  # each GPM sample freed, the failed ones too
    assert logged[0] == (
        "NVML error on GPU 0 (mem_used_mib: NVMLError: NVML error 15); "
        "those series are left out, the run goes on"
    )
    assert logged[1:] == [
        "GPU sampling failed 5 times: NVML error on GPU 0 (fb_free_mib: NVMLError: NVML error 15)"
    ]


def test_gpm_metrics_that_fail_leave_the_gpm_series_out(logged: list[str]) -> None:
    (names,) = scraped(FakeNvml([H200]).failing("nvmlGpmMetricsGet", LOST))
    assert "DCGM_FI_DEV_GPU_UTIL" in names and not {n for n in names if n.startswith("rig_gpu_")}
    assert logged == [
        "NVML error on GPU 0 (GPM metrics: NVMLError: NVML error 15); "
        "those series are left out, the run goes on"
    ]


def test_a_gpu_lost_at_its_handle_is_a_scrape_without_gpu_series(logged: list[str]) -> None:
    module = FakeNvml([H200]).failing("nvmlDeviceGetHandleByIndex", LOST, after=1)
    collector = gpus.GpuCollector.open({}, module)
    assert collector is not None
    collector._nvml._handles.clear()  # asked again, as after a driver reload
    assert list(collector.collect()) == [] and list(collector.collect()) == []
    collector.close()
    assert logged == [
        "NVML error (NVMLError: NVML error 15); those series are left out, the run goes on",
        "GPU sampling failed 2 times: NVML error (NVMLError: NVML error 15)",
    ]


def test_a_bug_at_a_gpus_handle_is_never_taken_for_a_lost_gpu() -> None:
    collector = gpus.GpuCollector.open(
        {}, FakeNvml([H200]).failing("nvmlDeviceGetHandleByIndex", KeyError("a bug"), after=1)
    )
    assert collector is not None
    collector._nvml._handles.clear()
    with pytest.raises(KeyError, match="a bug"):
        list(collector.collect())
    collector.close()
