"""The train step alone, on batches already on the device: eager, then with each of the step's levers
(rig.launch.steplevers) and Ultralytics' `amp=bf16`, then (with --compile) compiled, each from the same
weights on the same batches.

A step is Ultralytics' own: autocast forward and loss, the scaled backward, and every
`round(nbs / batch)` steps the optimizer step as its trainer takes it (unscale, clip the gradients'
norm at 10, GradScaler's step and update, zero the gradients, update the EMA), with the optimizer its
trainer builds (its parameter groups): the model family's recipe (MuSGD for YOLO26, SGD otherwise) or
--optimizer. The optimizer step is also timed alone, on the eager run's gradients, for its share of
the step: with MuSGD on a small model it can be most of it.

`amp=bf16` is measured against the fp16 step where the GPU has native bfloat16 (Ultralytics' own
autocast decides, and says why not): bfloat16 autocast and no GradScaler, as its trainer runs it.
rig train does not switch it on; the table says what it would give.

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
import statistics
import sysconfig
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.launch import steplevers
from rig.observe.bench.results import BF16, BenchOptions, LeverStep, Plan, StepResult, rate
from rig.yolo import augment, optkernels, ultra

_logger = log.get("bench")
Chooser = Callable[[Sequence[LeverStep], float], tuple[str, ...]]
NOMINAL_BATCH = 64  # Ultralytics' nbs: the step accumulates gradients up to it
# Steps whose losses are compared; on the CPU (a step of YOLO11n at 640 px: seconds) the timed ones.
GPU_EQUAL_STEPS = 50
CPU_NOISE = 1e-3  # relative: the bound of a lever's losses on the CPU (see the module's docstring)
# Ultralytics' optimizer names (BaseTrainer.build_optimizer's; "auto" picks one from the run's length,
# which a bench has not got).
OPTIMIZERS = ("SGD", "MuSGD", "AdamW", "Adam", "Adamax", "NAdam", "RAdam", "RMSprop")
OPTIMIZER_TIMINGS = 3  # optimizer steps timed alone; the median counts


def recipe_optimizer(model: str) -> str:
    """The optimizer a model family's recipe trains with: MuSGD for YOLO26 (Ultralytics' recipe names it;
    optimizer=auto picks it for runs over 10,000 iterations), SGD for the others."""
    return "MuSGD" if Path(model).stem.lower().startswith("yolo26") else "SGD"


def trainer_optimizer(model: Any, name: str, *, nc: int, batch: int) -> Any:
    """The optimizer Ultralytics' trainer builds for this model (its parameter groups; MuSGD's matrices
    apart, its head's at 3x the rate), at its default lr0 and momentum, the weight decay scaled by the
    images per optimizer step as it scales it."""
    cfg = ultra.default_cfg()
    accumulate = max(round(NOMINAL_BATCH / batch), 1)
    decay = float(cfg["weight_decay"]) * batch * accumulate / NOMINAL_BATCH
    # build_optimizer reads its trainer's args and data only for optimizer=auto, never named here.
    return ultra.build_optimizer(
        model, name, lr=float(cfg["lr0"]), momentum=float(cfg["momentum"]), decay=decay, nc=nc
    )


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
    bf16: bool = False  # Ultralytics' amp=bf16: bfloat16 autocast, no GradScaler


@dataclass(frozen=True)
class Run:
    losses: list[float]
    img_s: float
    first_step_s: float
    step_s: float  # a timed step's mean
    note: str | None = None  # what the variant did (the optimizer's kernels)
    optimizer_s: float | None = None  # one optimizer step alone (timed only where asked)
    optimizer_share: float | None = None  # its share of a step, each step's part of it counted


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
            b = augment.finish(dict(raw), device)  # ours leaves the pixel work to the device
            b = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            b["img"] = b["img"].float() / 255
            self.batches.append(b)
        self.batch = int(self.batches[0]["img"].shape[0])
        self.accumulate = max(round(NOMINAL_BATCH / self.batch), 1)
        self.optimizer_name = opts.optimizer or recipe_optimizer(opts.model)

    def optimizer(self, model: Any) -> Any:
        return trainer_optimizer(model, self.optimizer_name, nc=self.nc, batch=self.batch)

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

    def run(self, v: Variant, steps: int, warmup: int, time_optimizer: bool = False) -> Run:
        """`steps` steps of the variant; the losses of all, the time of those after `warmup`; with
        time_optimizer, then the optimizer step alone."""
        try:
            return self._run(v, steps, warmup, time_optimizer)
        finally:  # the variant's model, optimizer and graphs go before the next one is built
            gc.collect()
            if self.device.type == "cuda":
                _torch().cuda.empty_cache()

    def _run(self, v: Variant, steps: int, warmup: int, time_optimizer: bool) -> Run:
        torch = _torch()
        cuda = self.device.type == "cuda"
        model = self.model(v)
        opt = self.optimizer(model)
        note = None
        if v.fused:
            opt, note = optkernels.with_fast_kernels(opt)
        scaler = _grad_scaler(torch, v.amp and cuda and not v.bf16)
        ema = ultra.model_ema(model)
        autocast = ultra.torch_utils().autocast
        precision = torch.bfloat16 if v.bf16 else v.amp
        forward = torch.compile(model, mode=v.compile_mode) if v.compile_mode else None
        batches = [
            {**b, "img": b["img"].contiguous(memory_format=torch.channels_last)} if v.channels_last else b
            for b in self.batches
        ]
        losses = []

        def forward_backward(i: int) -> None:
            batch = batches[i % len(batches)]
            with autocast(precision, device=self.device.type):  # Ultralytics' own, bf16's check in it
                if forward is None:
                    loss, _ = model(batch)
                else:  # as Ultralytics' trainer runs a compiled model: the forward compiled, the loss eager
                    loss, _ = model.loss(batch, forward(batch["img"]))
            loss = loss.sum()
            losses.append(loss.detach())
            scaler.scale(loss).backward()

        def optimizer_step() -> None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            ema.update(model)

        def step(i: int) -> None:
            forward_backward(i)
            if (i + 1) % self.accumulate == 0:
                optimizer_step()

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
        timed_s = time.perf_counter() - t0
        step_s = timed_s / timed
        values = [float(x) for x in torch.stack(losses).float().cpu().tolist()]
        run = Run(values, self.batch / step_s, first, step_s, note)
        if not time_optimizer:
            return run
        # The optimizer step alone, on the gradients of one more step, restored before each timing.
        forward_backward(steps)
        params = [p for p in model.parameters() if p.grad is not None]
        grads = [p.grad.detach().clone() for p in params]
        times = []
        for _ in range(OPTIMIZER_TIMINGS):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            sync()
            t0 = time.perf_counter()
            optimizer_step()
            sync()
            times.append(time.perf_counter() - t0)
        optimizer_s = statistics.median(times)
        in_timed = sum(1 for i in range(max(warmup, 1), steps) if (i + 1) % self.accumulate == 0)
        share = optimizer_share(timed_s, timed, in_timed, optimizer_s, self.accumulate)
        return dataclasses.replace(run, optimizer_s=optimizer_s, optimizer_share=share)


def optimizer_share(
    timed_s: float, steps: int, optimizer_steps: int, optimizer_s: float, accumulate: int
) -> float:
    """The optimizer step's share of a train step: the timed steps less the optimizer steps among them
    are the forward and backward passes; each step then carries 1/accumulate of an optimizer step."""
    forward_backward = max(timed_s - optimizer_steps * optimizer_s, 0.0) / max(steps, 1)
    per_step = optimizer_s / max(accumulate, 1)
    total = forward_backward + per_step
    return per_step / total if total > 0 else 0.0


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
        eager = shared.run(eager_v, steps, warmup, time_optimizer=True)
    _logger.info(
        "train step on %s: %s img/s (batch %d); %s's step %.1f ms, %.0f%% of the step",
        device,
        rate(eager.img_s),
        shared.batch,
        shared.optimizer_name,
        1000 * (eager.optimizer_s or 0.0),
        100 * (eager.optimizer_share or 0.0),
    )
    base = StepResult(
        eager.img_s,
        batch=shared.batch,
        optimizer=shared.optimizer_name,
        optimizer_step_ms=None if eager.optimizer_s is None else 1000 * eager.optimizer_s,
        optimizer_share=eager.optimizer_share,
        accumulate=shared.accumulate,
    )
    if not opts.levers:
        return _compiled(base, shared, eager, opts, device, steps, warmup)

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
        (BF16, Variant(BF16, amp=True, bf16=True)),
    ):
        if name not in opts.levers:  # left out (--levers): not in the record, rig train keeps Ultralytics'
            continue
        blocked = _blocker(name, shared, device, use_amp)
        lever = LeverStep(name, None, note=blocked) if blocked else None
        levers.append(lever or _lever(name, variant, shared, eager, noise, equal, steps, warmup, device))
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
    result = _replace(
        base,
        levers=tuple(levers),
        amp_noise=noise,
        equal_steps=equal,
        chosen=chosen,
        chosen_img_s=chosen_img_s,
        eager_losses=tuple(eager.losses[:equal]),
    )
    return _compiled(result, shared, eager, opts, device, steps, warmup)


def _blocker(name: str, shared: _Steps, device: Any, use_amp: bool) -> str | None:
    """Why a lever cannot be measured here (it is then in the record as not measured), or None."""
    torch = _torch()
    if name == "cuda_graphs":
        return "CUDA graphs need a GPU" if device.type != "cuda" else compile_blocker()
    if name == "fused_optimizer":  # MuSGD, or a torch optimizer fused already: nothing to switch
        opt = shared.optimizer(shared.model(Variant("probe", amp=False)))
        faster, note = optkernels.with_fast_kernels(opt)
        return note if faster is opt else None
    if name == BF16:
        try:  # Ultralytics' own check: CUDA with native bfloat16 (compute capability 8 and later)
            with ultra.torch_utils().autocast(torch.bfloat16, device=device.type):
                pass
        except RuntimeError as e:
            return f"Ultralytics' amp=bf16 cannot run on {device}: {_first_line(e)}"
        if not use_amp:
            return "measured against the fp16 step, and this one trains in fp32 (--no-amp)"
    return None


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
