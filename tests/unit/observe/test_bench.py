"""`rig bench`'s parts that need neither torch nor Ultralytics: the GPU's busy share from telemetry's
sampler, the verdict, the table and JSON, the options."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rig import cli
from rig.errors import RigError
from rig.instrument import telemetry
from rig.instrument.telemetry import StepTotals
from rig.observe import bench
from rig.observe.bench import measure, realrun, results, step, tail
from rig.observe.bench.results import LeverStep, StepResult

from tests.helpers.waiting import wait_until
from tests.scripts.fake_nvml import FakeGpu, FakeNvml


def test_the_busy_share_is_telemetrys_samples_during_the_measured_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CUDA_VISIBLE_DEVICES=4,5: the run's cuda:1 is NVML's GPU 5; telemetry's CSV numbers it 1.
    gpus = [
        FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{0x18 + i:02x}:00.0", utils=[10 * i]) for i in range(6)
    ]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    recorder = telemetry.Recorder(
        tmp_path,
        interval_s=0.01,
        writer_factory=lambda _p: None,
        environ={"CUDA_VISIBLE_DEVICES": "4,5"},
        announce=False,
    )
    recorder.start()
    wait_until(lambda: len(telemetry.read_csv(tmp_path / telemetry.CSV_NAME)) >= 3, timeout=5, interval=0.01)
    start = time.time()
    wait_until(lambda: len(telemetry.read_csv(tmp_path / telemetry.CSV_NAME)) >= 6, timeout=5, interval=0.01)
    end = time.time()
    recorder.stop()
    rows = telemetry.read_csv(tmp_path / telemetry.CSV_NAME)
    during = realrun.busy_share(rows, 1, start, end)
    assert during and set(during) == {50.0}
    assert len(during) < len(rows)  # the samples before start and after end are not the steps'
    assert realrun.busy_share(rows, 0, start, end) == [40.0] * len(during)
    assert realrun.busy_share(rows, 2, start, end) == []  # no such GPU in the run


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
    bottleneck, why = results.verdict(train, 795.0, 263.0)
    assert bottleneck == expected
    assert f"{wait:.0%} of the real run's step time waited for data" in why
    if expected == "host":
        assert "busy 7%" in why and "bigger batch" in why


def test_without_a_real_run_the_verdict_compares_loader_and_step() -> None:
    assert results.verdict(None, 400.0, 900.0)[0] == "loader"
    assert results.verdict(None, 1500.0, 900.0) == ("compute", "loader 1500 img/s vs train step 900 img/s")


def _musgd(share: float) -> StepResult:
    # YOLO26n at batch 16: one MuSGD step every 4 steps (nbs 64).
    return StepResult(
        300.0, batch=16, optimizer="MuSGD", optimizer_step_ms=62.2, optimizer_share=share, accumulate=4
    )


def test_the_verdict_names_musgds_step_where_it_takes_most_of_the_train_step() -> None:
    fed = bench.TrainResult(img_s=263.0, data_wait_fraction=0.0, gpu_util_mean=7.0, batches=61)
    bottleneck, why = results.verdict(fed, 795.0, 263.0, _musgd(0.61))
    assert bottleneck == "optimizer"
    assert (
        "MuSGD's optimizer step takes 61% of the train step (62.2 ms, one every 4 steps of batch 16)" in why
    )
    assert "batch above nbs" in why
    # Under half of the step it is not the bottleneck; a loader the GPU waits on still comes first.
    assert results.verdict(fed, 795.0, 263.0, _musgd(0.49))[0] == "host"
    starved = bench.TrainResult(img_s=263.0, data_wait_fraction=0.3, gpu_util_mean=7.0, batches=61)
    assert results.verdict(starved, 795.0, 263.0, _musgd(0.9))[0] == "loader"
    # Without a real run (the CPU): the loader against the step, then the optimizer's share.
    assert results.verdict(None, 1500.0, 900.0, _musgd(0.7))[0] == "optimizer"
    assert results.verdict(None, 400.0, 900.0, _musgd(0.7))[0] == "loader"
    assert results.verdict(None, 1500.0, 900.0, StepResult(900.0))[0] == "compute"  # no share measured


@pytest.mark.parametrize(
    ("timed_s", "steps", "optimizer_steps", "optimizer_s", "accumulate", "share"),
    [
        (1.0, 10, 0, 0.1, 1, 0.1 / 0.2),  # no optimizer step among the timed (the CPU's few): 0.1 s a pass
        (1.0, 10, 10, 0.05, 1, 0.05 / 0.1),  # batch 64: one every step, 0.05 of each 0.1 s
        (1.0, 8, 2, 0.2, 4, 0.05 / (0.075 + 0.05)),  # batch 16: one every 4 steps
        (0.1, 10, 10, 0.05, 1, 1.0),  # timed alone it took longer than the steps: all of it
    ],
)
def test_the_optimizer_steps_share_counts_each_steps_part_of_it(
    timed_s: float, steps: int, optimizer_steps: int, optimizer_s: float, accumulate: int, share: float
) -> None:
    assert step.optimizer_share(timed_s, steps, optimizer_steps, optimizer_s, accumulate) == pytest.approx(
        share
    )


def test_the_steps_optimizer_is_the_models_recipe() -> None:
    assert (
        step.recipe_optimizer("yolo26n.yaml") == "MuSGD" and step.recipe_optimizer("/w/YOLO26s.pt") == "MuSGD"
    )
    assert (
        step.recipe_optimizer("yolo11n.yaml") == "SGD" and step.recipe_optimizer("tiny_detect.yaml") == "SGD"
    )


def test_the_optimizers_step_and_bf16_are_rows_of_the_table() -> None:
    levers = StepResult(
        100.0,
        levers=(
            LeverStep("bf16", 110.0, 1.1, 0.02, False),
            LeverStep("channels_last", None, note="x"),
        ),
        amp_noise=0.01,
        batch=16,
        optimizer="MuSGD",
        optimizer_step_ms=62.2,
        optimizer_share=0.61,
        accumulate=4,
    )
    res = bench.BenchResult(**{**_result(step_eager_img_s=100.0).__dict__, "step": levers})
    row = {line[:30].strip(): line for line in bench.format_table(res).splitlines()}
    assert "62.2 ms alone, one every 4 steps: 61% of the train step" in row["optimizer step (MuSGD)"]
    assert "1.10x eager, losses off by 2.00%" in row["with amp=bf16"]
    assert row["with amp=bf16"].endswith("rig train: yours to give (amp=bf16)")
    assert json.loads(res.to_json())["step"]["optimizer_share"] == 0.61


def test_the_real_run_is_timed_as_telemetry_times_steps() -> None:
    totals = StepTotals(steps=4, data_wait_s=1.0, step_s=4.0)
    assert results.train_result(totals, 16, [50.0, 70.0]) == bench.TrainResult(16.0, 0.25, 60.0, 4, 16)
    with pytest.raises(RigError, match="too short"):
        results.train_result(StepTotals(), 16, [])


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
    assert "train step (compute ceiling)      4.00  on cpu, eager" in table
    assert "train step, compiled" in table and "1.50x eager; first step 42.0 s" in table
    data = json.loads(_result(step_compiled_img_s=6.0, compile_s=42.0, compile_used=True).to_json())
    assert (data["step_eager_img_s"], data["step_compiled_img_s"], data["compile_s"]) == (4.0, 6.0, 42.0)
    assert data["compile_used"] is True and data["step_img_s"] == 6.0

    not_used = bench.format_table(_result(compile_note="torch.compile failed, measured without compile: x"))
    assert "compiled" not in not_used.split("bottleneck")[0] and "compile: torch.compile failed" in not_used


def test_compile_needs_a_cxx_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    from rig.observe.bench import step

    monkeypatch.setattr(step.shutil, "which", lambda _name: None)
    assert "C++ compiler (g++)" in (bench.compile_blocker() or "")


def test_the_device_tail_is_charged_to_the_step_and_shown_beside_the_loader() -> None:
    assert results.charge(100.0, None) == 100.0
    assert results.charge(100.0, 5.0) == pytest.approx(1 / (0.01 + 0.005))  # 10 ms + 5 ms per image
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
        results.charge(20.0, 0.5),
    )
    table = bench.format_table(bench.BenchResult(**{**res.__dict__, "loader": loader, "step_img_s": 3.0}))
    assert "loader, ours + device tail" in table and "0.500 ms/image on cpu, charged to the step" in table
    assert "train step + device tail" in table
    data = json.loads(bench.BenchResult(**{**res.__dict__, "loader": loader}).to_json())
    assert data["loader"]["device_tail_ms_per_image"] == 0.5
    assert "device tail" not in bench.format_table(res)  # RIG_DEVICE_AUGMENT=0: no tail to show


@pytest.mark.parametrize(
    ("img_s", "shown"),
    [(749.4, "749"), (26.34, "26.3"), (3.456, "3.46"), (0.4123, "0.412"), (0.0004, "0.0004")],
)
def test_rates_keep_three_significant_digits(img_s: float, shown: str) -> None:
    assert results.rate(img_s) == shown


def test_a_cpu_step_under_one_image_per_second_is_not_printed_as_zero() -> None:
    # YOLO11x at 640 px on a 2-CPU box: 0.41 img/s, which a whole-number format printed as "0 img/s".
    assert results.verdict(None, 25.0, 0.41) == ("compute", "loader 25.0 img/s vs train step 0.410 img/s")
    assert "0.410  on cpu, eager" in bench.format_table(_result(step_eager_img_s=0.41))


def _levers() -> StepResult:
    return StepResult(
        100.0,
        levers=(
            LeverStep("channels_last", 120.0, 1.2, 0.001, True),
            LeverStep(
                "fused_optimizer", 130.0, 1.3, 0.2, False, note="SGD on fused kernels (cuda, torch 2.11)"
            ),
            LeverStep("cuda_graphs", None, note="CUDA graphs need a GPU"),
        ),
        amp_noise=0.01,
        equal_steps=50,
        chosen=("channels_last",),
        batch=64,
    )


def test_each_lever_is_a_row_beside_eager_with_its_losses_and_rig_trains_choice() -> None:
    res = bench.BenchResult(**{**_result(step_eager_img_s=100.0).__dict__, "step": _levers()})
    lines = bench.format_table(res).splitlines()
    row = {line[:30].strip(): line for line in lines}
    assert "1.20x eager, losses within noise (0.10% <= 1.00%); rig train: on" in row["with channels_last"]
    assert "losses off by 20.00%, beyond the noise 1.00%; rig train: off" in row["with fused_optimizer"]
    assert "SGD on fused kernels" in row["with fused_optimizer"]
    assert row["with cuda_graphs"].endswith("-  CUDA graphs need a GPU")
    assert "eager, batch 64" in row["train step (compute ceiling)"]
    data = json.loads(res.to_json())
    assert [lv["name"] for lv in data["step"]["levers"]] == [
        "channels_last",
        "fused_optimizer",
        "cuda_graphs",
    ]
    assert data["step"]["chosen"] == ["channels_last"] and data["step"]["amp_noise"] == 0.01


def test_ours_and_stock_real_runs_sit_side_by_side() -> None:
    ours = bench.TrainResult(1600.0, 0.01, 95.0, 50, 64)
    stock = bench.TrainResult(400.0, 0.30, 20.0, 50, 16)
    res = bench.BenchResult(**{**_result().__dict__, "train": ours, "stock_train": stock})
    text = bench.format_table(res)
    assert (
        "real run, ours (rig train)" in text and "batch 64, GPU busy 95%, data wait 1% over 50 steps" in text
    )
    assert (
        "real run, stock yolo train" in text
        and "batch 16, GPU busy 20%, data wait 30% over 50 steps; ours 4.00x" in text
    )
    data = json.loads(res.to_json())
    assert data["stock_train"]["img_s"] == 400.0 and data["train"]["batch"] == 64


def test_the_device_tails_parts_each_get_a_row() -> None:
    # Where the tail has more than one part (geometry before the colour, say), each is shown alone.
    assert [p.name for p in tail.PARTS][-1] == "colour and layout"
    loader = bench.LoaderResult(
        10.0,
        20.0,
        2.0,
        [10.0],
        [20.0],
        {},
        {},
        [],
        0.1,
        0.5,
        19.8,
        {"geometry": 0.3, "colour and layout": 0.2},
    )
    text = bench.format_table(bench.BenchResult(**{**_result().__dict__, "loader": loader}))
    assert "  tail: geometry" in text and "0.300 ms/image" in text and "  tail: colour and layout" in text


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--parts", "loader,steps"], "give some of loader,tail,step,run,stock"),
        (["--batch", "0"], "give a whole number >= 1"),
        (["--equal-steps", "x"], "give a whole number >= 1"),
        (["--optimizer", "lion"], "give one of Ultralytics' SGD,MuSGD,AdamW"),
        (["--levers", "bf32"], "give some of channels_last,cuda_graphs,fused_optimizer,bf16"),
    ],
)
def test_bad_bench_options_are_one_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", *argv])
    assert exit_.value.code == 2 and error in capsys.readouterr().err


def test_the_benchs_gpu_is_read_from_nvml_as_the_launcher_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bench's cuda:1 under CUDA_VISIBLE_DEVICES=4,5 is NVML's GPU 5: its name and memory key the record
    # and size the batch, as `rig train` reads them (NVML, before any CUDA context).
    gpus = [
        FakeGpu(name=f"GPU {i}", bus_id=f"0000:{0x18 + i:02x}:00.0", mem_total=(i + 1) << 30)
        for i in range(6)
    ]
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpus))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.delenv("RIG_RUN_GPUS", raising=False)
    gpu = measure.gpu_memory(SimpleNamespace(index=1))
    assert gpu is not None and (gpu.name, gpu.total) == ("GPU 5", 6 << 30)
    assert measure.gpu_memory(SimpleNamespace(index=2)) is None  # no such CUDA device
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=9))
    assert measure.gpu_memory(SimpleNamespace(index=0)) is None
    cuda = SimpleNamespace(type="cuda", index=0)
    assert measure.decide_batch(bench.BenchOptions(), cuda, {}, None) == (
        16,
        "Ultralytics' default 16 (NVML cannot tell the GPU's memory)",
    )
    assert measure.decide_batch(bench.BenchOptions(batch=8), cuda, {}, None) == (8, "--batch as given")
