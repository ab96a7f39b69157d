"""DDP on CPU ranks (gloo): where Ultralytics' multi-GPU path assumes a GPU, the CPU equivalent.

Ultralytics 8.4 counts a CPU run as world size 0 and never trains DDP on it; rig's CPU ranks
(`rig train device=cpu --cpu-ranks N`) run its DDP path as GPU ranks do, and three of its steps
assume CUDA:
- the DDP wrap passes `device_ids=[device.index]`, which is `[None]` on the CPU: torch refuses
  any device_ids for a CPU module;
- the validator averages the validation loss with `ReduceOp.AVG`, which gloo lacks;
- the final validation (`model=best.pt`) builds its model on `cuda:current_device()` on every rank.
Each is corrected for the duration of the call that needs it, and only on CPU ranks.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any


def cpu_ddp_class(base: type) -> type:
    """DistributedDataParallel that drops the `device_ids=[None]` Ultralytics gives a CPU model."""

    class CpuDistributedDataParallel(base):  # type: ignore[misc]
        def __init__(self, module: Any, device_ids: Any = None, *args: Any, **kwargs: Any) -> None:
            if device_ids is not None and all(d is None for d in device_ids):
                device_ids = None
            super().__init__(module, device_ids, *args, **kwargs)

    return CpuDistributedDataParallel


class GlooDist:
    """torch.distributed as the validator sees it: `reduce(op=AVG)` becomes SUM, then a division."""

    def __init__(self, dist: Any) -> None:
        self._dist = dist

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)

    def reduce(self, tensor: Any, dst: int, op: Any = None, **kwargs: Any) -> Any:
        dist = self._dist
        if op is None:
            op = dist.ReduceOp.SUM
        if op != dist.ReduceOp.AVG:
            return dist.reduce(tensor, dst, op=op, **kwargs)
        done = dist.reduce(tensor, dst, op=dist.ReduceOp.SUM, **kwargs)
        tensor.div_(dist.get_world_size())
        return done


class _CpuBackend:
    """What `get_torch_device_backend` gives the validator for the index of its device: 0."""

    @staticmethod
    def current_device() -> int:
        return 0


def _on_cpu(**kwargs: Any) -> dict[str, Any]:
    torch: Any = importlib.import_module("torch")
    return {**kwargs, "device": torch.device("cpu")}


@contextlib.contextmanager
def setup_train() -> Iterator[None]:
    """Around the trainer's `_setup_train`: the DDP wrap of a CPU model."""
    parallel: Any = importlib.import_module("torch.nn.parallel")
    original = parallel.DistributedDataParallel
    parallel.DistributedDataParallel = cpu_ddp_class(original)
    try:
        yield
    finally:
        parallel.DistributedDataParallel = original


@contextlib.contextmanager
def validation() -> Iterator[None]:
    """Around a validation pass on CPU ranks: the loss average over gloo, the model on the CPU."""
    validator: Any = importlib.import_module("ultralytics.engine.validator")
    autobackend = validator.AutoBackend
    kept = {
        "dist": validator.dist,
        "get_torch_device_backend": validator.get_torch_device_backend,
        "AutoBackend": autobackend,
    }
    validator.dist = GlooDist(kept["dist"])
    validator.get_torch_device_backend = lambda _device: _CpuBackend
    validator.AutoBackend = lambda *args, **kwargs: autobackend(*args, **_on_cpu(**kwargs))
    try:
        yield
    finally:
        for name, value in kept.items():
            setattr(validator, name, value)
