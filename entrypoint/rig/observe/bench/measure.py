"""`rig bench`, every part in order on the same data and model, into one BenchResult:

1. loader: the train data loader alone, stock Ultralytics settings against ours (bench.loader);
2. tail: what ours leaves to the device, per part, on one real batch (bench.tail);
3. step: the train step on device-resident batches, eager and with each lever, the levers' losses
   against AMP's noise (bench.step); the measurement is recorded where `rig train` reads it
   (rig.launch.steplevers);
4. run: with a GPU, a short real run of ours as `rig train` would train (its batch, loader, levers),
   and 5. stock: stock `yolo train` at the same settings beside it (bench.realrun), each with the GPU's
   busy share over its measured steps.
Then the node image cache with several ranks (rig.observe.cachebench), and the bottleneck named.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import importlib
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rig import log
from rig.hardware import nvml
from rig.instrument import telemetry
from rig.launch import steplevers
from rig.observe import cachebench
from rig.observe.bench import loader, realrun, step, tail
from rig.observe.bench.results import (
    BenchOptions,
    BenchResult,
    LeverStep,
    LoaderResult,
    Plan,
    StepResult,
    TrainResult,
    charge,
    optimizer_dominates,
    verdict,
)
from rig.yolo import datasets, gpubatch, ultra

_logger = log.get("bench")
LONG_RUN = 10**9  # steps: a run long enough for any compile to pay back


def _imp(name: str) -> Any:
    """Import torch only when measuring: `rig` stays importable without it."""
    return importlib.import_module(name)


def plan(opts: BenchOptions, cuda: bool) -> Plan:
    rounds = 2 if opts.quick else 3
    if cuda:
        return Plan(
            rounds,
            loader_batches=20 if opts.quick else 60,
            step_warmup=10,
            step_iters=30 if opts.quick else 100,
            run_steps=20 if opts.quick else 50,
        )
    # A CPU step of YOLO11n at 640 px, batch 16, takes seconds: one timed step after two warm-ups (the
    # second step still measured 30x the third in a tiny run, eager and compiled alike).
    return Plan(
        rounds,
        loader_batches=20 if opts.quick else 40,
        step_warmup=2,
        step_iters=1 if opts.quick else 3,
        run_steps=0,
    )


def gpu_memory(device: Any) -> gpubatch.GpuMemory | None:
    """The bench's GPU as NVML sees it, read before this process touches CUDA (as `rig train`'s launcher
    reads it, before any rank has a context): its name and memory. None without NVML."""
    with nvml.session() as (lib, _state):
        if lib is None:
            return None
        try:
            found = dict(telemetry.nvml_run_gpus(lib, os.environ)).get(device.index or 0)
            if found is None:
                return None
            total, free = lib.memory(found.index)
        except Exception:  # NVML errors, a CUDA_VISIBLE_DEVICES entry naming no GPU
            return None
    return gpubatch.GpuMemory(found.name, total, free)


def decide_batch(
    opts: BenchOptions, device: Any, data: dict[str, Any], gpu: gpubatch.GpuMemory | None
) -> tuple[int, str]:
    """The per-GPU batch: --batch as given, else what `rig train` picks on this GPU (rig.yolo.gpubatch)."""
    if opts.batch is not None:
        return opts.batch, "--batch as given"
    default = int(ultra.default("batch"))
    if device.type != "cuda":
        return default, f"Ultralytics' default {default} (the batch from the GPU's memory needs a GPU)"
    if gpu is None:
        return default, f"Ultralytics' default {default} (NVML cannot tell the GPU's memory)"
    choice = gpubatch.decide(
        model=opts.model,
        imgsz=opts.imgsz,
        gpus=[gpu],
        world=1,
        nbs=int(ultra.default("nbs")),
        amp=opts.amp,
        nc=len(data.get("names") or ()) or 80,
    )
    return choice.per_gpu, choice.reason


def lever_key(
    opts: BenchOptions, device: Any, batch: int, gpu: gpubatch.GpuMemory | None
) -> steplevers.LeverKey:
    """The record's key, spelled as the launcher spells it: the GPU's name from NVML."""
    torch = _imp("torch")
    cuda = device.type == "cuda"
    name = (gpu.name if gpu else torch.cuda.get_device_name(device)) if cuda else "cpu"
    return steplevers.key_for(
        device=name,
        torch=steplevers.torch_version(),
        model=opts.model,
        imgsz=opts.imgsz,
        batch=batch,
        amp=opts.amp and cuda,
    )


def lever_record(
    key: steplevers.LeverKey, eager_img_s: float, levers: Sequence[LeverStep], noise: float | None, steps: int
) -> steplevers.LeverRecord:
    measured = tuple(
        steplevers.Measured(
            name=lv.name,
            gain=lv.gain,
            equal=lv.equal,
            loss_delta=lv.loss_delta,
            noise=noise,
            setup_s=lv.setup_s,
            note=lv.note,
        )
        for lv in levers
    )
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")
    return steplevers.LeverRecord(key, eager_img_s, measured, when, steps)


def _chooser(key: steplevers.LeverKey, cpu: bool) -> step.Chooser:
    """The levers rig train would switch on from the bench's figures, for a run long enough to pay back a
    compile (the bench cannot know the run's length; rig train weighs it)."""

    def choose(levers: Sequence[LeverStep], eager_img_s: float) -> tuple[str, ...]:
        record = lever_record(key, eager_img_s, levers, None, 0)
        decided = steplevers.decide({}, record, key=key, cpu=cpu, run_steps=LONG_RUN)
        return tuple(c.name for c in decided.choices if c.on)

    return choose


def run_bench(opts: BenchOptions) -> BenchResult:
    # Ultralytics' progress bars and per-dataset chatter would bury the table; its warnings stay.
    os.environ.setdefault("YOLO_VERBOSE", "False")
    torch = _imp("torch")
    cuda = torch.cuda.is_available() and opts.device != "cpu"
    device = torch.device(
        opts.device if opts.device and opts.device != "cpu" else ("cuda:0" if cuda else "cpu")
    )
    p = plan(opts, device.type == "cuda")
    data_yaml = loader.bench_data(opts)
    data = ultra.check_dataset(str(data_yaml)) or {}
    n_train = datasets.count_train_images(str(data_yaml), ultra.datasets_dir())
    gpu = gpu_memory(device) if device.type == "cuda" else None
    batch, batch_reason = decide_batch(opts, device, data, gpu)
    _logger.info("batch %d per GPU: %s", batch, batch_reason)

    loader_part, ours_ds, ours_settings = loader.measure(data, n_train, opts, p, batch, device.type)
    raw = loader.batches(ours_ds, batch, 4 if device.type == "cuda" else 2)
    tail_ms, tail_parts = tail.ms_per_image(raw[0], device) if "tail" in opts.parts else (None, {})
    if tail_ms is not None:
        _logger.info("device tail on %s: %.3f ms per image (%s)", device, tail_ms, tail_parts)
    del ours_ds
    gc.collect()
    loader_result = _with_tail(loader_part, ours_settings, tail_ms, tail_parts)
    cache = _cache_bench(data, opts, p, batch) if "loader" in opts.parts else None

    key = lever_key(opts, device, batch, gpu)
    steps = StepResult(0.0, batch=batch)
    record_path = None
    if "step" in opts.parts:
        steps = step.measure(data, raw, opts, device, p, _chooser(key, device.type != "cuda"))
        if opts.levers and opts.record:
            record = lever_record(key, steps.eager_img_s, steps.levers, steps.amp_noise, steps.equal_steps)
            record_path = _record(record)
    del raw
    gc.collect()
    step_img_s = charge(steps.compiled_img_s or steps.eager_img_s, tail_ms) if steps.eager_img_s else 0.0

    train: TrainResult | None = None
    stock_train: TrainResult | None = None
    optimizer = opts.optimizer or step.recipe_optimizer(opts.model)  # the real runs train with the step's
    if device.type == "cuda" and "run" in opts.parts:
        levers = steplevers.decide(
            {}, steplevers.read_record(key, steplevers.record_dir()), key=key, cpu=False, run_steps=LONG_RUN
        )
        settings = {
            **{k: ours_settings[k] for k in loader.LOADER_KEYS},
            "optimizer": optimizer,
            **_typed(levers.args),
        }
        train = realrun.run(
            data_yaml,
            opts,
            device,
            stock=False,
            batch=batch,
            settings=settings,
            steps=p.run_steps,
            env=levers.env,
        )
        _logger.info("real run, ours: %.1f img/s (%s)", train.img_s, realrun.describe(train))
    if device.type == "cuda" and "stock" in opts.parts:
        stock_settings, _, _ = loader.settings(opts, n_train, batch)
        stock_settings = {**stock_settings, "optimizer": optimizer}
        stock_batch = opts.batch if opts.batch is not None else int(ultra.default("batch"))
        stock_train = realrun.run(
            data_yaml, opts, device, stock=True, batch=stock_batch, settings=stock_settings, steps=p.run_steps
        )
        _logger.info("real run, stock: %.1f img/s (%s)", stock_train.img_s, realrun.describe(stock_train))
    if train is None and not (loader_result.ours_img_s and step_img_s):
        bottleneck, why = "unknown", "the loader or the step was not measured (--parts)"
        if dominant := optimizer_dominates(steps):  # the step alone says as much
            bottleneck, why = "optimizer", dominant
    else:
        bottleneck, why = verdict(train, loader_result.ours_img_s, step_img_s, steps)
    return BenchResult(
        loader=loader_result,
        step_img_s=step_img_s,
        train=train,
        bottleneck=bottleneck,
        bottleneck_reason=why,
        options=asdict(opts) | {"data": str(data_yaml)},
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        cpus=len(os.sched_getaffinity(0)),
        amp_used=opts.amp and device.type == "cuda",
        compile_used=steps.compile_used,
        compile_note=steps.compile_note,
        step_eager_img_s=steps.eager_img_s,
        step_compiled_img_s=steps.compiled_img_s,
        compile_s=steps.compile_s,
        cache=cache,
        step=steps if "step" in opts.parts else None,
        stock_train=stock_train,
        batch=batch,
        batch_reason=batch_reason,
        levers_record=str(record_path) if record_path else None,
    )


def _typed(args: dict[str, str]) -> dict[str, Any]:
    return {k: ultra.smart_value(v) for k, v in args.items()}


def _record(record: steplevers.LeverRecord) -> Path | None:
    try:
        path = steplevers.write_record(record, steplevers.record_dir())
    except OSError as e:  # a read-only cache volume: the figures are in the table and JSON anyway
        _logger.warning("levers: not recorded for rig train (%s)", e)
        return None
    _logger.info("levers: recorded for rig train in %s", path)
    return path


def _with_tail(
    part: LoaderResult | None, ours: dict[str, Any], tail_ms: float | None, tail_parts: dict[str, float]
) -> LoaderResult:
    base = part or LoaderResult(0.0, 0.0, 0.0, [], [], {}, dict(ours), [], 0.0)
    with_tail = charge(base.ours_img_s, tail_ms) if tail_ms is not None and base.ours_img_s else None
    return dataclasses.replace(
        base, device_tail_ms_per_image=tail_ms, ours_with_tail_img_s=with_tail, device_tail_parts=tail_parts
    )


def _cache_bench(
    data: dict[str, Any], opts: BenchOptions, p: Plan, batch: int
) -> cachebench.CacheResult | None:
    ranks = opts.ranks if opts.ranks is not None else (0 if opts.quick else cachebench.default_ranks())
    if ranks < 1:
        return None
    return cachebench.run(
        data,
        ranks=ranks,
        imgsz=opts.imgsz,
        batch=max(batch // ranks, 1),  # as DDP splits it
        workers=opts.workers,
        batches=p.loader_batches * ranks,  # each rank loads as many images as the one-loader measure
    )
