"""The optimizer Ultralytics built, rebuilt to run on torch's fused kernels (one kernel for every
parameter), else its multi-tensor ones (a few kernels per step), instead of a loop over parameters.

Ultralytics passes fused=True for Adam and AdamW on CUDA only; SGD (and the Adam family on the CPU,
where newer torch has fused kernels too) runs torch's default, the multi-tensor path on CUDA and a
per-parameter loop on the CPU. A fused optimizer also reads GradScaler's inf flag on the device:
without it, GradScaler.step waits for the GPU (a host sync) on every optimizer step.

Whether a kernel exists is asked of torch itself, by one step of a one-element parameter on the
training device: torch 2.3 accepts SGD(fused=True) on the CPU and fails only at its first step.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any


def _probe(cls: type, device: Any, **kwargs: Any) -> bool:
    torch: Any = importlib.import_module("torch")
    try:
        p = torch.zeros(1, device=device, requires_grad=True)
        p.grad = torch.zeros_like(p)
        cls([p], lr=0.0, **kwargs).step()
    except Exception:  # RuntimeError (no kernel), ValueError/TypeError (not for this device or class)
        return False
    return True


def _rebuilt(optimizer: Any, **kind: bool) -> Any:
    groups = [{**g, "fused": None, "foreach": None, **kind} for g in optimizer.param_groups]
    return type(optimizer)(groups, **kind)


def with_fast_kernels(optimizer: Any) -> tuple[Any, str]:
    """(the optimizer on fused or multi-tensor kernels, what was done); the optimizer itself when it has
    no such kernels here or uses them already. Call before any step: the state is not carried over."""
    cls = type(optimizer)
    name = cls.__name__
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if not params:
        return optimizer, f"{name} has no parameters; kept"
    if not cls.__module__.startswith("torch.optim"):
        return optimizer, f"{name} is not torch's (Ultralytics' MuSGD is multi-tensor already); kept"
    device = params[0].device
    accepts = inspect.signature(cls.__init__).parameters
    where = f"{device.type}, torch {getattr(importlib.import_module('torch'), '__version__', '?')}"
    if "fused" in accepts and _probe(cls, device, fused=True):
        if all(g.get("fused") for g in optimizer.param_groups):
            return optimizer, f"{name} is fused already (Ultralytics does so for Adam and AdamW on CUDA)"
        return _rebuilt(optimizer, fused=True), f"{name} on fused kernels ({where})"
    if "foreach" in accepts and _probe(cls, device, foreach=True):
        why = f"no fused {name} kernel ({where})"
        if all(g.get("foreach") for g in optimizer.param_groups):
            return optimizer, f"{name} is multi-tensor already ({why})"
        return _rebuilt(optimizer, foreach=True), f"{name} on multi-tensor (foreach) kernels: {why}"
    return optimizer, f"no fused or multi-tensor {name} kernel ({where}); kept"
