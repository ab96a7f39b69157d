"""`rig bench`'s parts that need neither torch nor Ultralytics: the GPU sampler."""

from __future__ import annotations

import json
import sys
import time

import pytest
from rig.errors import RigError
from rig.observe import bench
from rig.observe.telemetry import StepTotals

from tests.helpers.waiting import wait_until
from tests.scripts.fake_nvml import FakeGpu, FakeNvml


def test_the_gpu_sampler_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu(utils=[30, 50])])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with bench._GpuSampler(0, interval=0.01) as gpu:
        wait_until(lambda: len(gpu.samples) >= 2, timeout=5, interval=0.01)
    assert gpu.samples[:2] == [30, 50]
    assert not fake.initialised


def test_the_gpu_sampler_reads_the_cuda_device_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA_VISIBLE_DEVICES=4,5: cuda:0 is NVML's GPU 4, not NVML's GPU 0.
    gpus = [
        FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{0x18 + i:02x}:00.0", utils=[10 * i]) for i in range(6)
    ]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    for ordinal, util in ((0, 40), (1, 50)):
        with bench._GpuSampler(ordinal, interval=0.01, environ={"CUDA_VISIBLE_DEVICES": "4,5"}) as gpu:
            wait_until(lambda: len(gpu.samples) >= 1, timeout=5, interval=0.01)
        assert set(gpu.samples) == {util}
    with bench._GpuSampler(2, interval=0.01, environ={"CUDA_VISIBLE_DEVICES": "4,5"}) as gpu:
        pass  # no such CUDA device: nothing measured, NVML shut down
    assert gpu.samples == []


def test_the_gpu_sampler_without_nvml_measures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=9))
    with bench._GpuSampler(0, interval=0.01) as gpu:
        pass
    assert gpu.samples == []


def test_the_gpu_sampler_averages_the_measured_steps_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real run's setup (model, dataset, AMP check) and its end idle the GPU: the utilisation
    # that sits beside the steps' img/s is read between restart() and pause(), as the steps are.
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([FakeGpu(utils=[7])]))
    with bench._GpuSampler(0, interval=0.01) as gpu:
        wait_until(lambda: len(gpu.samples) >= 3, timeout=5, interval=0.01)
        gpu.restart()
        assert len(gpu.samples) <= 1
        wait_until(lambda: len(gpu.samples) >= 2, timeout=5, interval=0.01)
        gpu.pause()
        held = len(gpu.samples)
        time.sleep(0.2)  # twenty intervals
        assert len(gpu.samples) <= held + 1  # one read may have been under way at pause()


@pytest.mark.parametrize(
    ("wait", "util", "expected"),
    [
        (0.3, 20.0, "loader"),  # the GPU waits for data, whatever it does with the rest
        (0.0, 7.0, "host"),  # an H200 on YOLO11n at batch 16: fed, yet idle 93% of its steps
        (0.0, 95.0, "compute"),
        (0.05, None, "compute"),  # no NVML: data wait alone
    ],
)
def test_the_verdict_names_the_bottleneck(wait: float, util: float | None, expected: str) -> None:
    train = bench.TrainResult(img_s=263.0, data_wait_fraction=wait, gpu_util_mean=util, batches=61)
    bottleneck, why = bench.verdict(train, 795.0, 263.0)
    assert bottleneck == expected
    assert f"{wait:.0%} of the real run's step time waited for data" in why
    if expected == "host":
        assert "busy 7%" in why and "bigger batch" in why


def test_without_a_real_run_the_verdict_compares_loader_and_step() -> None:
    assert bench.verdict(None, 400.0, 900.0)[0] == "loader"
    assert bench.verdict(None, 1500.0, 900.0) == ("compute", "loader 1500 img/s vs train step 900 img/s")


def test_the_real_run_is_timed_as_telemetry_times_steps() -> None:
    totals = StepTotals(steps=4, data_wait_s=1.0, step_s=4.0)
    assert bench.train_result(totals, 16, [50.0, 70.0]) == bench.TrainResult(16.0, 0.25, 60.0, 4)
    with pytest.raises(RigError, match="too short"):
        bench.train_result(StepTotals(), 16, [])


def _result(**step: object) -> bench.BenchResult:
    loader = bench.LoaderResult(10.0, 20.0, 2.0, [10.0], [20.0], {"cache": False}, {"cache": "ram"}, [], 0.1)
    fields = {"step_eager_img_s": 4.0, "step_compiled_img_s": None, "compile_s": None}
    fields |= {"compile_used": False, "compile_note": None, **step}
    return bench.BenchResult(
        loader=loader,
        step_img_s=float(fields["step_compiled_img_s"] or fields["step_eager_img_s"]),  # type: ignore[arg-type]
        train=None,
        bottleneck="compute",
        bottleneck_reason="r",
        options={},
        device="cpu",
        cpus=2,
        amp_used=False,
        **fields,  # type: ignore[arg-type]
    )


def test_the_compiled_step_is_reported_beside_the_eager_one() -> None:
    table = bench.format_table(_result(step_compiled_img_s=6.0, compile_s=42.0, compile_used=True))
    assert "train step (compute ceiling)       4.0  on cpu, eager" in table
    assert "train step, compiled" in table and "1.50x eager; first step 42.0 s" in table
    data = json.loads(_result(step_compiled_img_s=6.0, compile_s=42.0, compile_used=True).to_json())
    assert (data["step_eager_img_s"], data["step_compiled_img_s"], data["compile_s"]) == (4.0, 6.0, 42.0)
    assert data["compile_used"] is True and data["step_img_s"] == 6.0

    not_used = bench.format_table(_result(compile_note="torch.compile failed, measured without compile: x"))
    assert "compiled" not in not_used.split("bottleneck")[0] and "compile: torch.compile failed" in not_used


def test_compile_needs_a_cxx_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda _name: None)
    assert "C++ compiler (g++)" in (bench.compile_blocker() or "")


def test_the_device_tail_is_charged_to_the_step_and_shown_beside_the_loader() -> None:
    assert bench.charge(100.0, None) == 100.0
    assert bench.charge(100.0, 5.0) == pytest.approx(1 / (0.01 + 0.005))  # 10 ms + 5 ms per image
    res = _result()
    loader = bench.LoaderResult(
        10.0,
        20.0,
        2.0,
        [10.0],
        [20.0],
        {"cache": False},
        {"cache": "ram"},
        [],
        0.1,
        0.5,
        bench.charge(20.0, 0.5),
    )
    table = bench.format_table(bench.BenchResult(**{**res.__dict__, "loader": loader, "step_img_s": 3.0}))
    assert "loader, ours + device tail" in table and "0.500 ms/image on cpu, charged to the step" in table
    assert "train step + device tail" in table
    data = json.loads(bench.BenchResult(**{**res.__dict__, "loader": loader}).to_json())
    assert data["loader"]["device_tail_ms_per_image"] == 0.5
    assert "device tail" not in bench.format_table(res)  # RIG_DEVICE_AUGMENT=0: no tail to show
