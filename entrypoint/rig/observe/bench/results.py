"""What `rig bench` measures, as values: the options, each part's result, the whole, and the verdict.

The JSON (BenchResult.to_json) keeps every key earlier versions wrote; parts added since sit beside
them with defaults, so a reader of an older file still finds what it knew.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from rig.errors import RigError
from rig.instrument.telemetry import StepTotals
from rig.launch import steplevers
from rig.observe import cachebench
from rig.yolo import ultra

BF16 = "bf16"  # Ultralytics' amp=bf16 against fp16: measured beside the levers, never switched on by rig
MEASURED = (*steplevers.LEVERS, BF16)  # what the step measures beside eager


@dataclass(frozen=True)
class BenchOptions:
    data: str | None = None  # a data yaml; None generates the shapes dataset
    model: str = "yolo11n.yaml"  # an architecture: random weights, nothing to download
    imgsz: int = ultra.DEFAULT_IMGSZ
    batch: int | None = None  # None: what `rig train` picks (from the GPU's memory; 16 on the CPU)
    workers: int | None = None  # ours: None lets the launch decision pick
    amp: bool = True
    compile: bool = False
    quick: bool = False
    device: str | None = None  # None: the first GPU if any, else cpu
    deterministic: bool | None = None  # the step measure; None: the baked default
    train_images: int = 512  # generated dataset: several times the mosaic buffer (8 batches)
    # Generated images: camera-sized (720p video frames) rather than pre-shrunk to imgsz, so the
    # loader decodes and resizes as it does with most users' data. The cache's gain grows with it.
    source_size: tuple[int, int] = (1280, 720)
    # cache=ram with this many ranks at once, stock against the node image cache (rig.observe.cachebench);
    # None: the ranks `rig train` would start (skipped by --quick), 0: not measured.
    ranks: int | None = None
    levers: tuple[str, ...] = MEASURED  # the step with each of these beside eager; (): none
    equal_steps: int | None = None  # steps whose losses are compared; None: 50 on a GPU, fewer on the CPU
    parts: tuple[str, ...] = ("loader", "tail", "step", "run", "stock")  # what to measure
    record: bool = True  # write the levers' measurement where `rig train` reads it
    optimizer: str | None = None  # Ultralytics' optimizer name; None: the model family's recipe


PARTS = ("loader", "tail", "step", "run", "stock")


@dataclass(frozen=True)
class Plan:
    rounds: int
    loader_batches: int
    step_warmup: int
    step_iters: int
    run_steps: int  # the real runs' measured steps (after STARTUP_BATCHES)


@dataclass(frozen=True)
class LoaderResult:
    """The loader alone, stock Ultralytics settings against ours, in images/s."""

    stock_img_s: float
    ours_img_s: float
    speedup: float
    stock_rounds: list[float]
    ours_rounds: list[float]
    stock: dict[str, Any]
    ours: dict[str, Any]
    ours_reasons: list[str]
    ours_dataset_build_s: float
    # What ours leaves to the device (rig.yolo.augment.device), timed there per image and charged to the
    # step; None with RIG_DEVICE_AUGMENT=0.
    device_tail_ms_per_image: float | None = None
    ours_with_tail_img_s: float | None = None  # the loader and the tail one after the other
    # Each part of the tail alone (rig.observe.bench.tail.PARTS), ms per image, in the tail's order.
    device_tail_parts: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LeverStep:
    """The step with one lever (rig.launch.steplevers), against eager on the same weights and batches."""

    name: str
    img_s: float | None  # None: not measured here (note says why)
    gain: float | None = None  # img_s / eager's
    loss_delta: float | None = None  # the largest relative difference of the first steps' losses from eager's
    equal: bool | None = None  # loss_delta within AMP's own noise (StepResult.amp_noise)
    setup_s: float = 0.0  # the first step's time (compiling, capturing) beyond a plain step's
    note: str | None = None
    losses: tuple[float, ...] = ()  # the compared steps' losses, as eager's beside them


@dataclass(frozen=True)
class StepResult:
    """The train step on device-resident batches: eager, with each lever, (with --compile) compiled."""

    eager_img_s: float
    compiled_img_s: float | None = None
    compile_s: float | None = (
        None  # the first compiled step: tracing, kernel builds (or cache reads), one step
    )
    compile_used: bool = False
    compile_note: str | None = None
    levers: tuple[LeverStep, ...] = ()
    amp_noise: float | None = None  # AMP's own deviation from fp32 over the compared steps (CPU: a bound)
    equal_steps: int = 0
    chosen: tuple[str, ...] = ()  # the levers `rig train` would switch on from this measurement
    chosen_img_s: float | None = None  # the step with all of them
    batch: int = 0
    optimizer: str = ""
    eager_losses: tuple[float, ...] = ()  # the first equal_steps steps' losses, eager
    optimizer_step_ms: float | None = None  # one optimizer step alone (unscale, clip, step, zero, EMA)
    optimizer_share: float | None = None  # its share of a train step (one every `accumulate` steps)
    accumulate: int = 1  # steps per optimizer step: nbs / batch


@dataclass(frozen=True)
class TrainResult:
    """A short real run (GPU only): ours (rig's trainer and decisions) or stock Ultralytics."""

    img_s: float
    data_wait_fraction: float
    gpu_util_mean: float | None  # the GPU's busy share (NVML), % over the measured steps
    batches: int
    batch: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchResult:
    loader: LoaderResult
    step_img_s: float  # the step as training would run it: compiled when compile was used, the tail charged
    train: TrainResult | None  # ours
    bottleneck: str  # "loader", "host" or "compute" (verdict)
    bottleneck_reason: str
    options: dict[str, Any]
    device: str
    cpus: int
    amp_used: bool
    compile_used: bool
    compile_note: str | None
    step_eager_img_s: float
    step_compiled_img_s: float | None  # None without --compile, or when it could not compile
    compile_s: float | None
    cache: cachebench.CacheResult | None = None
    step: StepResult | None = None
    stock_train: TrainResult | None = None  # stock `yolo train` at the same settings
    batch: int = 0  # ours' per-GPU batch
    batch_reason: str = ""
    levers_record: str | None = None  # where `rig train` reads the levers' measurement

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str) + "\n"


def charge(img_s: float, tail_ms: float | None) -> float:
    """A rate with the device tail's time per image added to each image's time."""
    return img_s if not tail_ms else 1.0 / (1.0 / img_s + tail_ms / 1000.0)


def train_result(
    totals: StepTotals, batch: int, gpu_util: list[float], settings: dict[str, Any] | None = None
) -> TrainResult:
    if totals.steps < 1 or totals.step_s <= 0:
        raise RigError("bench: the training run was too short to measure; use more --train-images")
    return TrainResult(
        img_s=totals.steps * batch / totals.step_s,
        data_wait_fraction=totals.data_wait_s / totals.step_s,
        gpu_util_mean=statistics.fmean(gpu_util) if gpu_util else None,
        batches=totals.steps,
        batch=batch,
        settings=dict(settings or {}),
    )


HOST_BOUND_UTIL = 50.0  # % busy: below it, with the loader keeping up, the step's host side bounds it
OPTIMIZER_DOMINANT = 0.5  # the optimizer step's share of a train step from which it is the bottleneck


def optimizer_dominates(step: StepResult | None) -> str | None:
    """Why the optimizer step is the bottleneck, where it takes most of the train step; else None."""
    if step is None or step.optimizer_share is None or step.optimizer_share < OPTIMIZER_DOMINANT:
        return None
    return (
        f"{step.optimizer}'s optimizer step takes {step.optimizer_share:.0%} of the train step "
        f"({step.optimizer_step_ms:.1f} ms, one every {step.accumulate} steps of batch {step.batch}); "
        f"each serves nbs images whatever the batch, so a batch above nbs (YOLO26's recipe trains at 128) "
        "or a faster optimizer step (a newer Ultralytics) is what speeds training up"
    )


def verdict(
    train: TrainResult | None, ours_img_s: float, step_img_s: float, step: StepResult | None = None
) -> tuple[str, str]:
    """The bottleneck and why: "loader" (the GPU waits for data), "optimizer" (the loader keeps up and
    the optimizer step, timed alone, takes most of the train step: MuSGD on a small model), "host"
    (the loader keeps up but the GPU is idle most of each step: Python, kernel launches, the optimizer
    and EMA on the CPU side; measured on an H200 with YOLO11n at batch 16: GPU busy a few %, batch 64
    2.6x the images/s), or "compute". Without a real run (no GPU), the loader's rate against the train
    step's."""
    optimizer = optimizer_dominates(step)
    if train is None:
        figures = f"loader {rate(ours_img_s)} img/s vs train step {rate(step_img_s)} img/s"
        if ours_img_s < step_img_s:
            return "loader", figures
        return ("optimizer", f"{figures}; {optimizer}") if optimizer else ("compute", figures)
    waited = f"{train.data_wait_fraction:.0%} of the real run's step time waited for data"
    if train.data_wait_fraction > 0.1:
        return "loader", waited
    if optimizer:
        return "optimizer", f"{waited}; {optimizer}"
    if train.gpu_util_mean is not None and train.gpu_util_mean < HOST_BOUND_UTIL:
        return "host", (
            f"{waited}, yet the GPU was busy {train.gpu_util_mean:.0f}% of its steps: each step waits "
            "on Python and kernel launches; a bigger batch (or more images per GPU) amortises them"
        )
    return "compute", waited


def rate(img_s: float) -> str:
    """An images/s figure with three significant digits and no exponent: 749, 26.3, 0.412 (a CPU step
    of a large model is under one image per second, which a whole-number format shows as 0)."""
    if img_s >= 100:
        return f"{img_s:.0f}"
    if img_s >= 10:
        return f"{img_s:.1f}"
    if img_s >= 1:
        return f"{img_s:.2f}"
    return f"{img_s:.3f}" if img_s >= 0.001 else f"{img_s:.2g}"
