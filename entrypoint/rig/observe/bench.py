"""`rig bench`: where does training time go on this machine, and what do our defaults buy?

In one run, on the same data and model:
- the train data loader alone (images/s), with stock Ultralytics settings and with ours, in
  alternating rounds so both see the same machine state;
- the model's train step alone on a device-resident batch (images/s): the compute ceiling;
- with a GPU, a short real training run: images/s, GPU utilisation and the fraction of step time
  spent waiting for data.
It prints a table, writes JSON and names the bottleneck.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import shutil
import statistics
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.hardware import nvml
from rig.observe import cachebench
from rig.observe.telemetry import StepTimer, StepTotals, nvml_run_gpus
from rig.yolo import datasets, device_augment, overlay, tuning, ultra
from rig.yolo.nodecache import cached_dataset

_logger = log.get("bench")


def _imp(name: str) -> Any:
    """Import torch and NVML only when measuring: `rig` stays importable without them."""
    return importlib.import_module(name)


@dataclass(frozen=True)
class BenchOptions:
    data: str | None = None  # a data yaml; None generates the shapes dataset
    model: str = "yolo11n.yaml"  # an architecture: random weights, nothing to download
    imgsz: int = ultra.DEFAULT_IMGSZ
    batch: int = ultra.DEFAULT_BATCH
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


@dataclass(frozen=True)
class _Plan:
    rounds: int
    loader_batches: int
    step_warmup: int
    step_iters: int


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
    # The pixel work ours leaves to the device (rig.yolo.device_augment: mosaic, warp, colour, layout),
    # timed there per image and charged to the step; None with RIG_DEVICE_AUGMENT=0.
    device_tail_ms_per_image: float | None = None
    ours_with_tail_img_s: float | None = None  # the loader and the tail one after the other


@dataclass(frozen=True)
class TrainResult:
    """The short real run (GPU only)."""

    img_s: float
    data_wait_fraction: float
    gpu_util_mean: float | None
    batches: int


@dataclass(frozen=True)
class StepResult:
    """The train step on one device-resident batch, eager and (with --compile) compiled."""

    eager_img_s: float
    compiled_img_s: float | None = None
    compile_s: float | None = (
        None  # the first compiled step: tracing, kernel builds (or cache reads), one step
    )
    compile_used: bool = False
    compile_note: str | None = None


@dataclass(frozen=True)
class BenchResult:
    loader: LoaderResult
    step_img_s: float  # the step as training would run it: compiled when compile was used
    train: TrainResult | None
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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str) + "\n"


def _plan(opts: BenchOptions, cuda: bool) -> _Plan:
    rounds = 2 if opts.quick else 3
    if cuda:
        return _Plan(
            rounds,
            loader_batches=20 if opts.quick else 60,
            step_warmup=10,
            step_iters=30 if opts.quick else 100,
        )
    # A CPU step of YOLO11n at 640 px, batch 16, takes seconds: one timed step after two warm-ups (the
    # second step still measured 30x the third in a tiny run, eager and compiled alike).
    return _Plan(
        rounds, loader_batches=20 if opts.quick else 40, step_warmup=2, step_iters=1 if opts.quick else 3
    )


# ---------------------------------------------------------------------------------------------
# Settings: stock (Ultralytics' packaged defaults) and ours (overlay + launch decisions)


LOADER_KEYS = ("cache", "workers")


def settings(
    opts: BenchOptions, train_images: int | None
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The loader settings for stock and ours, and the reasons for ours."""
    cfg = ultra.default_cfg()
    # In the image cfg is already ours and upstream.yaml records what the overlay replaced; in a
    # plain environment (tools/gpu_check_bench.sh) cfg is stock and the overlay is read from
    # RIG_CONFIGS_DIR. Keys the overlay leaves alone are the same in both.
    upstream, ours_static = overlay.upstream_values(), overlay.overlay_values()
    stock: dict[str, Any] = {k: upstream.get(k, cfg[k]) for k in LOADER_KEYS}
    ours: dict[str, Any] = {k: ours_static.get(k, cfg[k]) for k in LOADER_KEYS}
    user: dict[str, str] = {"imgsz": str(opts.imgsz), "batch": str(opts.batch)}
    if opts.workers is not None:
        user["workers"] = str(opts.workers)
        ours["workers"] = opts.workers
    reasons = []
    for d in tuning.decide(
        user_args=user,
        train_images=train_images,
        resources=tuning.read_resources(),
        rank_cpus=len(os.sched_getaffinity(0)),
        nranks=1,
    ):
        ours[d.key] = int(d.value) if d.key == "workers" else (False if d.value == "False" else d.value)
        reasons.append(f"{d.key}={d.value}: {d.reason}")
    return stock, ours, reasons


# ---------------------------------------------------------------------------------------------
# Measurements


def _dataset(data: dict[str, Any], opts: BenchOptions, cache: Any, ours: bool = False) -> tuple[Any, float]:
    """ours: as under `rig train`, cache=ram in the node image cache and the augmentation's pixel work
    left to the device (unless RIG_DEVICE_AUGMENT=0)."""
    cfg = ultra.get_cfg({"imgsz": opts.imgsz, "batch": opts.batch, "cache": cache})
    t0 = time.perf_counter()
    with contextlib.ExitStack() as hooks:
        if ours:
            hooks.enter_context(cached_dataset.in_use(cfg))
            hooks.enter_context(device_augment.in_use("train"))
        ds = ultra.build_yolo_dataset(cfg, data["train"], opts.batch, data, mode="train", stride=32)
    return ds, time.perf_counter() - t0


TAIL_REPEATS = 5


def tail_ms_per_image(batch: dict[str, Any], device: Any, repeats: int = TAIL_REPEATS) -> float | None:
    """The device tail of one real batch of ours (host to device copy included, synchronised), the
    median of repeats after one warm-up; None when the batch was finished by the workers."""
    torch = _imp("torch")
    if device_augment.KEY not in batch:
        return None
    times = []
    for i in range(repeats + 1):
        copy = device_augment.handed_over(batch)
        if device.type == "cuda":
            copy["img"] = copy["img"].pin_memory()
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        device_augment.finish(copy, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times) / device_augment.images_in(batch)


def _loader_img_s(dataset: Any, opts: BenchOptions, workers: int, batches: int, device: str) -> float:
    loader = ultra.build_dataloader(dataset, opts.batch, workers, shuffle=True, rank=-1, device=device)
    try:
        it = _forever(loader)
        for _ in range(max(workers, 1) + 1):  # worker start-up is not throughput
            next(it)
        n, t0 = 0, time.perf_counter()
        for _ in range(batches):
            n += device_augment.images_in(next(it))
        return n / (time.perf_counter() - t0)
    finally:
        loader.close()
        del loader
        gc.collect()


def _forever(loader: Any) -> Iterator[Any]:
    """Batches across epoch ends: Ultralytics' loader keeps its workers between epochs."""
    while True:
        yield from loader


def compile_blocker() -> str | None:
    """Why torch.compile cannot work here, or None. Inductor builds C++ kernels on the CPU and Triton
    its GPU launcher with the C compiler; both include Python's headers."""
    if not (shutil.which("g++") or shutil.which("c++")):
        missing = "a C++ compiler (g++)"
    elif not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        missing = "Python's headers (Python.h)"
    else:
        return None
    return f"torch.compile (inductor) builds kernels with {missing}, which is missing; measured without it"


def _step(
    data: dict[str, Any], batch: dict[str, Any], opts: BenchOptions, device: Any, plan: _Plan
) -> StepResult:
    """The step eager, then the same model compiled (the same weights and batch), each timed alone."""
    torch = _imp("torch")
    cuda = device.type == "cuda"
    deterministic = opts.deterministic
    if deterministic is None:
        deterministic = bool(ultra.default_cfg()["deterministic"])
    ultra.init_seeds(0, deterministic)  # as the trainer does
    model = ultra.detection_model(opts.model, len(data["names"])).to(device)
    model.args = ultra.get_cfg({"imgsz": opts.imgsz, "batch": opts.batch})
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    use_amp = opts.amp and cuda  # Ultralytics trains in fp32 on CPU
    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    batch = device_augment.finish(dict(batch), device)  # ours leaves the pixel work to the device
    dev_batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    dev_batch["img"] = dev_batch["img"].float() / 255
    images = device_augment.images_in(batch)

    def step(module: Any) -> None:
        with torch.autocast(device.type, enabled=use_amp):
            if module is model:
                loss, _ = model(dev_batch)
            else:  # as Ultralytics' trainer runs a compiled model: the forward compiled, the loss eager
                loss, _ = model.loss(dev_batch, module(dev_batch["img"]))
        scaler.scale(loss.sum()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def timed(module: Any, steps: int) -> float:
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(module)
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    timed(model, plan.step_warmup)
    eager = plan.step_iters * images / timed(model, plan.step_iters)
    if not opts.compile:
        return StepResult(eager)
    if note := compile_blocker():
        return StepResult(eager, compile_note=note)
    compiled = torch.compile(model)  # compiles lazily: in the first step, forward and backward
    try:
        compile_s = timed(compiled, 1)
    except Exception as e:  # inductor's errors are many and long: the first line says which
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return StepResult(eager, compile_note=f"torch.compile failed, measured without compile: {first}")
    timed(compiled, plan.step_warmup)  # after the compile, as many warm-ups as eager had
    return StepResult(
        eager,
        compiled_img_s=plan.step_iters * images / timed(compiled, plan.step_iters),
        compile_s=compile_s,
        compile_used=True,
    )


class _GpuSampler:
    """Mean GPU utilisation from NVML, sampled in a thread while a run is in progress.

    ordinal is the run's CUDA device; NVML numbers every GPU of the machine, so the sampler reads
    the GPU telemetry matches to that ordinal (under CUDA_VISIBLE_DEVICES=4,5, cuda:0 is NVML's 4)."""

    def __init__(
        self,
        ordinal: int,
        interval: float = 0.1,
        nvml_module: Any | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._ordinal, self._interval, self._module = ordinal, interval, nvml_module
        self._environ = os.environ if environ is None else environ
        self._index = -1  # NVML's index of that GPU, once found
        self.samples: list[float] = []
        self._recording = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._nvml: nvml.Nvml | None = None

    def _run(self) -> None:
        assert self._nvml is not None
        while not self._stop.wait(self._interval):
            try:
                value = self._nvml.utilization(self._index)
            except Exception:  # a GPU lost mid-run: the mean of what was read
                return
            if self._recording:
                self.samples.append(value)

    def restart(self) -> None:
        """Forget what was read so far: the mean is the measured steps', not the run's setup."""
        self.samples = []
        self._recording = True

    def pause(self) -> None:
        """Stop recording (the steps are over; what follows is saving and tearing down)."""
        self._recording = False

    def __enter__(self) -> _GpuSampler:
        self._nvml, state = nvml.Nvml.open(self._module)
        if self._nvml is not None:
            try:
                found = dict(nvml_run_gpus(self._nvml, self._environ)).get(self._ordinal)
            except Exception as e:  # NVML errors, a CUDA_VISIBLE_DEVICES entry naming no GPU
                found, state = None, f"NVML cannot tell GPU {self._ordinal} ({nvml.describe_error(e)})"
            else:
                state = state if found is not None else f"NVML does not see CUDA GPU {self._ordinal}"
            if found is None:
                self._nvml.close()
                self._nvml = None
            else:
                self._index = found.index
        if self._nvml is None:
            _logger.info("%s: the real run's GPU utilisation is not measured", state)
        else:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._nvml is not None:
            self._nvml.close()


STARTUP_BATCHES = 3  # the real run's first batches (workers starting, cudnn autotuning) are not throughput


def _train_run(data_yaml: Path, ours: dict[str, Any], opts: BenchOptions, device: Any) -> TrainResult:
    """One short epoch with rig's trainer (Ultralytics' with the device tail), its steps timed as
    telemetry times them."""
    rig_trainer_class = _imp("rig.launch.trainer").rig_trainer_class
    timer = StepTimer()
    seen = 0
    gpu = _GpuSampler(device.index or 0)

    def batch_end(_trainer: Any) -> None:
        nonlocal seen
        timer.batch_end()
        seen += 1
        if seen == STARTUP_BATCHES:
            timer.drain()
            gpu.restart()  # utilisation over the measured steps only, as their img/s is

    model = ultra.yolo(opts.model)
    model.add_callback("on_train_epoch_start", lambda _t: timer.epoch_start())
    model.add_callback("on_train_batch_start", lambda _t: timer.batch_start())
    model.add_callback("on_train_batch_end", batch_end)
    model.add_callback("on_train_epoch_end", lambda _t: gpu.pause())
    with tempfile.TemporaryDirectory(prefix="rig-bench-run-") as project, gpu:
        model.train(
            trainer=rig_trainer_class(model.task_map[model.task]["trainer"]),
            data=str(data_yaml),
            epochs=1,
            imgsz=opts.imgsz,
            batch=opts.batch,
            amp=opts.amp,
            val=False,
            plots=False,
            save=False,
            project=project,
            name="bench",
            exist_ok=True,
            device=device.index or 0,
            verbose=False,
            **ours,
        )
    return train_result(timer.drain() if seen > STARTUP_BATCHES else StepTotals(), opts.batch, gpu.samples)


HOST_BOUND_UTIL = 50.0  # % busy: below it, with the loader keeping up, the step's host side bounds it


def verdict(train: TrainResult | None, ours_img_s: float, step_img_s: float) -> tuple[str, str]:
    """The bottleneck and why: "loader" (the GPU waits for data), "host" (the loader keeps up but the
    GPU is idle most of each step: Python, kernel launches, the optimizer and EMA on the CPU side;
    measured on an H200 with YOLO11n at batch 16: GPU busy a few %, batch 64 2.6x the images/s), or
    "compute". Without a real run (no GPU), the loader's rate against the train step's."""
    if train is None:
        bottleneck = "loader" if ours_img_s < step_img_s else "compute"
        return bottleneck, f"loader {ours_img_s:.0f} img/s vs train step {step_img_s:.0f} img/s"
    waited = f"{train.data_wait_fraction:.0%} of the real run's step time waited for data"
    if train.data_wait_fraction > 0.1:
        return "loader", waited
    if train.gpu_util_mean is not None and train.gpu_util_mean < HOST_BOUND_UTIL:
        return "host", (
            f"{waited}, yet the GPU was busy {train.gpu_util_mean:.0f}% of its steps: each step waits "
            "on Python and kernel launches; a bigger batch (or more images per GPU) amortises them"
        )
    return "compute", waited


def train_result(totals: StepTotals, batch: int, gpu_util: list[float]) -> TrainResult:
    if totals.steps < 1 or totals.step_s <= 0:
        raise RigError("bench: the training run was too short to measure; use more --train-images")
    return TrainResult(
        img_s=totals.steps * batch / totals.step_s,
        data_wait_fraction=totals.data_wait_s / totals.step_s,
        gpu_util_mean=statistics.fmean(gpu_util) if gpu_util else None,
        batches=totals.steps,
    )


# ---------------------------------------------------------------------------------------------
# The run


def _bench_data(opts: BenchOptions) -> Path:
    if opts.data:  # as `rig train` hands it to Ultralytics (a moved dataset: a copy with its root)
        from rig.yolo import hostdata

        return Path(hostdata.resolve_args([f"data={opts.data}"])[0].removeprefix("data="))
    from rig.yolo.demo_data import YAML_NAME, make_demo_dataset

    # In the datasets volume, so it is generated once; a temporary directory if that is read-only.
    base = ultra.datasets_dir() / ".rig-bench"
    try:
        base.mkdir(parents=True, exist_ok=True)
        writable = os.access(base, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        base = Path(tempfile.gettempdir()) / "rig-bench"
    w, h = opts.source_size
    root = base / f"shapes-{opts.train_images}-{w}x{h}"
    if (root / YAML_NAME).is_file():
        return root / YAML_NAME
    _logger.info("generating %d images of %dx%d px in %s (once)", opts.train_images, w, h, root)
    return make_demo_dataset(root, train=opts.train_images, val=16, imgsz=w, height=h, force=root.exists())


def run_bench(opts: BenchOptions) -> BenchResult:
    # Ultralytics' progress bars and per-dataset chatter would bury the table; its warnings stay.
    os.environ.setdefault("YOLO_VERBOSE", "False")
    torch = _imp("torch")
    cuda = torch.cuda.is_available() and opts.device != "cpu"
    device = torch.device(
        opts.device if opts.device and opts.device != "cpu" else ("cuda:0" if cuda else "cpu")
    )
    plan = _plan(opts, device.type == "cuda")
    data_yaml = _bench_data(opts)
    data = ultra.check_dataset(str(data_yaml)) or {}
    n_train = datasets.count_train_images(str(data_yaml), ultra.datasets_dir())
    stock, ours, reasons = settings(opts, n_train)
    for reason in reasons:
        _logger.info("ours: %s", reason)

    stock_ds, _ = _dataset(data, opts, stock["cache"])
    ours_ds, ours_build_s = _dataset(data, opts, ours["cache"], ours=True)
    rates: dict[str, list[float]] = {"stock": [], "ours": []}
    for r in range(plan.rounds):  # alternate so drift (thermal, page cache, neighbours) hits both
        for name, ds, cfg in (("stock", stock_ds, stock), ("ours", ours_ds, ours))[
            :: 1 if r % 2 == 0 else -1
        ]:
            rates[name].append(_loader_img_s(ds, opts, int(cfg["workers"]), plan.loader_batches, device.type))
            _logger.info("loader %s round %d: %.1f img/s", name, r + 1, rates[name][-1])
    batch = next(iter(_first_batch(ours_ds, opts)))
    tail_ms = tail_ms_per_image(batch, device)
    if tail_ms is not None:
        _logger.info("device tail (mosaic, warp, colour, layout) on %s: %.3f ms per image", device, tail_ms)
    del stock_ds, ours_ds
    gc.collect()
    cache = _cache_bench(data, opts, plan)

    steps = _step(data, batch, opts, device, plan)
    _logger.info("train step on %s: %.1f img/s", device, steps.eager_img_s)
    if steps.compiled_img_s is not None:
        _logger.info(
            "train step compiled: %.1f img/s, after %.1f s for the first step",
            steps.compiled_img_s,
            steps.compile_s,
        )
    step = charge(steps.compiled_img_s or steps.eager_img_s, tail_ms)

    train = _train_run(data_yaml, ours, opts, device) if device.type == "cuda" else None
    stock_img_s, ours_img_s = statistics.median(rates["stock"]), statistics.median(rates["ours"])
    bottleneck, why = verdict(train, ours_img_s, step)
    return BenchResult(
        loader=LoaderResult(
            stock_img_s=stock_img_s,
            ours_img_s=ours_img_s,
            speedup=ours_img_s / stock_img_s,
            stock_rounds=rates["stock"],
            ours_rounds=rates["ours"],
            stock=stock,
            ours=ours,
            ours_reasons=reasons,
            ours_dataset_build_s=ours_build_s,
            device_tail_ms_per_image=tail_ms,
            ours_with_tail_img_s=None if tail_ms is None else charge(ours_img_s, tail_ms),
        ),
        step_img_s=step,
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
    )


def charge(img_s: float, tail_ms: float | None) -> float:
    """A rate with the device tail's time per image added to each image's time."""
    return img_s if not tail_ms else 1.0 / (1.0 / img_s + tail_ms / 1000.0)


def _cache_bench(data: dict[str, Any], opts: BenchOptions, plan: _Plan) -> cachebench.CacheResult | None:
    ranks = opts.ranks if opts.ranks is not None else (0 if opts.quick else cachebench.default_ranks())
    if ranks < 1:
        return None
    return cachebench.run(
        data,
        ranks=ranks,
        imgsz=opts.imgsz,
        batch=max(opts.batch // ranks, 1),  # as DDP splits it
        workers=opts.workers,
        batches=plan.loader_batches * ranks,  # each rank loads as many images as the one-loader measure
    )


def _first_batch(dataset: Any, opts: BenchOptions) -> Any:
    return ultra.build_dataloader(dataset, opts.batch, 0, shuffle=False, rank=-1, device="cpu")


def format_table(res: BenchResult) -> str:
    ld = res.loader
    rows = [
        ("loader, stock Ultralytics", f"{ld.stock_img_s:.1f}", _kv(ld.stock)),
        ("loader, ours", f"{ld.ours_img_s:.1f}", f"{_kv(ld.ours)}  ({ld.speedup:.2f}x stock)"),
    ]
    if ld.device_tail_ms_per_image is not None and ld.ours_with_tail_img_s is not None:
        tail = f"{ld.device_tail_ms_per_image:.3f} ms/image on {res.device}, charged to the step"
        rows.append(("loader, ours + device tail", f"{ld.ours_with_tail_img_s:.1f}", tail))
    rows.append(("train step (compute ceiling)", f"{res.step_eager_img_s:.1f}", f"on {res.device}, eager"))
    if ld.device_tail_ms_per_image is not None:
        rows.append(
            ("train step + device tail", f"{res.step_img_s:.1f}", "as training runs it: the tail charged")
        )
    if res.step_compiled_img_s is not None:
        ratio = res.step_compiled_img_s / res.step_eager_img_s
        first = f"first step {res.compile_s:.1f} s (compiling, or reading the cache's kernels)"
        rows.append(
            ("train step, compiled", f"{res.step_compiled_img_s:.1f}", f"{ratio:.2f}x eager; {first}")
        )
    if res.train:
        t = res.train
        util = "n/a" if t.gpu_util_mean is None else f"{t.gpu_util_mean:.0f}%"
        rows.append(("real run", f"{t.img_s:.1f}", f"GPU util {util}, data wait {t.data_wait_fraction:.0%}"))
    if res.cache:
        rows += cachebench.format_rows(res.cache)
    width = max(len(r[0]) for r in rows)
    lines = [f"{'measure':<{width}}  {'img/s':>8}  notes"]
    lines += [f"{a:<{width}}  {b:>8}  {c}" for a, b, c in rows]
    lines.append(f"bottleneck: {res.bottleneck} ({res.bottleneck_reason})")
    if res.compile_note:
        lines.append(f"compile: {res.compile_note}")
    return "\n".join(lines)


def _kv(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())
