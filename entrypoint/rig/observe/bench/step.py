"""The train step alone, on batches already on the device: eager, then with each of the step's levers
(rig.launch.steplevers), then (with --compile) compiled, each from the same weights on the same batches.

A step is Ultralytics' own: autocast forward and loss, the scaled backward, and every
`round(nbs / batch)` steps the optimizer step as its trainer takes it (unscale, clip the gradients'
norm at 10, GradScaler's step and update, zero the gradients, update the EMA).

Each variant runs the same steps from the same start: the first `equal_steps` losses are kept (on the
device, read after the timing, so reading them adds no host sync), and the steps after the warm-up are
timed. A lever's losses must stay within AMP's own noise: the largest relative gap between the
AMP run's losses and fp32's over the same steps, measured on the GPU (fp16 against fp32, whichever
the step trains in). On the CPU, where Ultralytics trains in fp32 and has no AMP, the bound is
CPU_NOISE: a lever there may only reorder fp32 sums (its losses measured 0 to 3e-6 apart), and the
CPU's own half precision, bfloat16, measured 3.5x the eager step's time, which no bench should pay.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import importlib
import shutil
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.launch import steplevers
from rig.observe.bench.results import BenchOptions, LeverStep, Plan, StepResult, rate
from rig.yolo import device_augment, optkernels, ultra

_logger = log.get("bench")
Chooser = Callable[[Sequence[LeverStep], float], tuple[str, ...]]
NOMINAL_BATCH = 64  # Ultralytics' nbs: the step accumulates gradients up to it
# Steps whose losses are compared; on the CPU (a step of YOLO11n at 640 px: seconds) the timed ones.
GPU_EQUAL_STEPS = 50
CPU_NOISE = 1e-3  # relative: the bound of a lever's losses on the CPU (see the module's docstring)


def _torch() -> Any:
    return importlib.import_module("torch")


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


@dataclass(frozen=True)
class Variant:
    """How one measured step differs from eager."""

    name: str
    amp: bool
    channels_last: bool = False
    fused: bool = False
    compile_mode: str | None = None


@dataclass(frozen=True)
class Run:
    losses: list[float]
    img_s: float
    first_step_s: float
    step_s: float  # a timed step's mean
    note: str | None = None  # what the variant did (the optimizer's kernels)


def loss_gap(losses: Sequence[float], reference: Sequence[float]) -> float:
    """The largest relative difference, step by step, of two runs' losses."""
    gaps = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference, strict=False)]
    return max(gaps, default=0.0)


class _Steps:
    """What every variant shares: the starting weights, the batches on the device, the plan."""

    def __init__(
        self, data: dict[str, Any], raw_batches: Sequence[dict[str, Any]], opts: BenchOptions, device: Any
    ) -> None:
        torch = _torch()
        self.device, self.opts = device, opts
        deterministic = opts.deterministic
        self.deterministic = (
            bool(ultra.default_cfg()["deterministic"]) if deterministic is None else deterministic
        )
        ultra.init_seeds(0, self.deterministic)  # as the trainer does
        base = ultra.detection_model(opts.model, len(data["names"]))
        self.state = copy.deepcopy(base.state_dict())
        self.nc = len(data["names"])
        self.batches = []
        for raw in raw_batches:
            b = device_augment.finish(dict(raw), device)  # ours leaves the pixel work to the device
            b = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            b["img"] = b["img"].float() / 255
            self.batches.append(b)
        self.batch = int(self.batches[0]["img"].shape[0])
        self.accumulate = max(round(NOMINAL_BATCH / self.batch), 1)

    def model(self, v: Variant) -> Any:
        torch = _torch()
        ultra.init_seeds(0, self.deterministic)
        model = ultra.detection_model(self.opts.model, self.nc)
        model.load_state_dict(self.state)
        model = model.to(self.device)
        if v.channels_last:
            model = model.to(memory_format=torch.channels_last)
        model.args = ultra.get_cfg({"imgsz": self.opts.imgsz, "batch": self.batch})
        model.train()
        return model

    def run(self, v: Variant, steps: int, warmup: int) -> Run:
        """`steps` steps of the variant; the losses of all, the time of those after `warmup`."""
        try:
            return self._run(v, steps, warmup)
        finally:  # the variant's model, optimizer and graphs go before the next one is built
            gc.collect()
            if self.device.type == "cuda":
                _torch().cuda.empty_cache()

    def _run(self, v: Variant, steps: int, warmup: int) -> Run:
        torch = _torch()
        cuda = self.device.type == "cuda"
        model = self.model(v)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
        note = None
        if v.fused:
            opt, note = optkernels.with_fast_kernels(opt)
        scaler = _grad_scaler(torch, v.amp and cuda)
        ema = ultra.model_ema(model)
        forward = torch.compile(model, mode=v.compile_mode) if v.compile_mode else None
        batches = [
            {**b, "img": b["img"].contiguous(memory_format=torch.channels_last)} if v.channels_last else b
            for b in self.batches
        ]
        losses = []

        def step(i: int) -> None:
            batch = batches[i % len(batches)]
            with torch.autocast(self.device.type, enabled=v.amp):
                if forward is None:
                    loss, _ = model(batch)
                else:  # as Ultralytics' trainer runs a compiled model: the forward compiled, the loss eager
                    loss, _ = model.loss(batch, forward(batch["img"]))
            loss = loss.sum()
            losses.append(loss.detach())
            scaler.scale(loss).backward()
            if (i + 1) % self.accumulate == 0:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
                ema.update(model)

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize(self.device)

        sync()
        t0 = time.perf_counter()
        step(0)
        sync()
        first = time.perf_counter() - t0
        for i in range(1, warmup):
            step(i)
        sync()
        t0 = time.perf_counter()
        for i in range(max(warmup, 1), steps):
            step(i)
        sync()
        timed = max(steps - max(warmup, 1), 1)
        step_s = (time.perf_counter() - t0) / timed
        values = [float(x) for x in torch.stack(losses).float().cpu().tolist()]
        return Run(values, self.batch / step_s, first, step_s, note)


def _grad_scaler(torch: Any, enabled: bool) -> Any:
    """torch.amp's GradScaler (torch.cuda.amp's warns from torch 2.4 on), or the old one before 2.3."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@contextlib.contextmanager
def _announced(name: str, device: Any) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    _logger.info("step %s on %s: measured in %.0f s", name, device, time.perf_counter() - t0)


def measure(
    data: dict[str, Any],
    raw_batches: Sequence[dict[str, Any]],
    opts: BenchOptions,
    device: Any,
    plan: Plan,
    choose: Chooser,
) -> StepResult:
    """Eager, each lever, the levers `choose` picks from those figures together, and (--compile)
    compiled; choose(levers, eager img/s) -> the lever names rig train would switch on."""
    cuda = device.type == "cuda"
    use_amp = opts.amp and cuda  # Ultralytics trains in fp32 on CPU
    shared = _Steps(data, raw_batches, opts, device)
    equal = opts.equal_steps or (GPU_EQUAL_STEPS if cuda else plan.step_warmup + plan.step_iters)
    warmup = plan.step_warmup
    steps = max(equal, warmup + plan.step_iters)
    eager_v = Variant("eager", amp=use_amp)
    with _announced("eager", device):
        eager = shared.run(eager_v, steps, warmup)
    _logger.info("train step on %s: %s img/s (batch %d)", device, rate(eager.img_s), shared.batch)
    if not opts.levers:
        result = StepResult(eager.img_s, batch=shared.batch, optimizer="SGD")
        return _compiled(result, shared, eager, opts, device, steps, warmup)

    noise = CPU_NOISE
    if cuda:  # AMP's own noise: the other precision of the two the GPU trains in, the same steps
        noise_v = Variant("fp32", amp=False) if use_amp else Variant("fp16", amp=True)
        with _announced(f"{noise_v.name} (AMP's noise)", device):
            reference = shared.run(noise_v, equal, min(warmup, equal - 1))
        noise = loss_gap(eager.losses[:equal], reference.losses[:equal])

    levers: list[LeverStep] = []
    for name, variant in (
        ("channels_last", Variant("channels_last", amp=use_amp, channels_last=True)),
        ("fused_optimizer", Variant("fused_optimizer", amp=use_amp, fused=True)),
        ("cuda_graphs", Variant("cuda_graphs", amp=use_amp, compile_mode=steplevers.GRAPHS_MODE)),
    ):
        if name not in opts.levers:  # left out (--levers): not in the record, rig train keeps Ultralytics'
            continue
        levers.append(_lever(name, variant, shared, eager, noise, equal, steps, warmup, device))
    chosen = choose(levers, eager.img_s)
    chosen_img_s = None
    if len(chosen) > 1:
        combined = Variant(
            "chosen",
            amp=use_amp,
            channels_last="channels_last" in chosen,
            fused="fused_optimizer" in chosen,
            compile_mode=steplevers.GRAPHS_MODE if "cuda_graphs" in chosen else None,
        )
        with _announced("with " + " + ".join(chosen), device):
            chosen_img_s = shared.run(combined, steps, warmup).img_s
    result = StepResult(
        eager.img_s,
        levers=tuple(levers),
        amp_noise=noise,
        equal_steps=equal,
        chosen=chosen,
        chosen_img_s=chosen_img_s,
        batch=shared.batch,
        optimizer="SGD",
        eager_losses=tuple(eager.losses[:equal]),
    )
    return _compiled(result, shared, eager, opts, device, steps, warmup)


def _lever(
    name: str,
    variant: Variant,
    shared: _Steps,
    eager: Run,
    noise: float,
    equal: int,
    steps: int,
    warmup: int,
    device: Any,
) -> LeverStep:
    if name == "cuda_graphs" and device.type != "cuda":
        return LeverStep(name, None, note="CUDA graphs need a GPU")
    if name == "cuda_graphs" and (blocker := compile_blocker()):
        return LeverStep(name, None, note=blocker)
    try:
        with _announced(name, device):
            run = shared.run(variant, steps, warmup)
    except Exception as e:  # a lever this torch or device lacks: measured as absent, the bench goes on
        return LeverStep(name, None, note=f"failed: {_first_line(e)}")
    delta = loss_gap(run.losses[:equal], eager.losses[:equal])
    return LeverStep(
        name,
        run.img_s,
        gain=run.img_s / eager.img_s,
        loss_delta=delta,
        equal=delta <= noise,
        setup_s=max(run.first_step_s - run.step_s, 0.0),
        note=run.note,
        losses=tuple(run.losses[:equal]),
    )


def _compiled(
    result: StepResult, shared: _Steps, eager: Run, opts: BenchOptions, device: Any, steps: int, warmup: int
) -> StepResult:
    """--compile: the model compiled in torch.compile's default mode, as `compile=True` trains."""
    if not opts.compile:
        return result
    if note := compile_blocker():
        return _replace(result, compile_note=note)
    try:
        with _announced("compiled", device):
            variant = Variant("compiled", amp=opts.amp and device.type == "cuda", compile_mode="default")
            run = shared.run(variant, steps, warmup)
    except Exception as e:  # inductor's errors are many and long: the first line says which
        return _replace(
            result, compile_note=f"torch.compile failed, measured without compile: {_first_line(e)}"
        )
    _logger.info(
        "train step compiled: %s img/s, after %.1f s for the first step", rate(run.img_s), run.first_step_s
    )
    return _replace(result, compiled_img_s=run.img_s, compile_s=run.first_step_s, compile_used=True)


def _replace(result: StepResult, **changes: Any) -> StepResult:
    return dataclasses.replace(result, **changes)
