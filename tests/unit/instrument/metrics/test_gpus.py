"""rig.instrument.metrics.gpus: dcgm-exporter's names, units and labels from NVML (the fake module)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from rig.instrument.metrics import gpus

from tests.helpers.metrics import A100, H200, promtool, samples
from tests.scripts.fake_nvml import FakeNvml


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
