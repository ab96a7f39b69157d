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
import sys
from collections.abc import Iterator
from typing import Any

from rig.yolo import ultra


def cpu_ddp_class(base: type) -> type:
    """DistributedDataParallel that drops the `device_ids=[None]` Ultralytics gives a CPU model."""

    class CpuDistributedDataParallel(base):  # type: ignore[misc]
        def __init__(self, module: Any, device_ids: Any = None, *args: Any, **kwargs: Any) -> None:
            if device_ids is not None and all(d is None for d in device_ids):
                device_ids = None
            super().__init__(module, device_ids, *args, **kwargs)

    return CpuDistributedDataParallel


class GlooDist:
    """torch.distributed as the validators see it. Validation runs in inference mode, and gloo runs
    a collective on a thread of its own, outside it, where writing an inference tensor is refused:
    tensors are handed over as normal copies and written back, objects gathered outside inference
    mode. And `ReduceOp.AVG`, which gloo lacks, is SUM and a division."""

    _IN_PLACE = frozenset({"reduce", "all_reduce", "broadcast"})
    _OBJECTS = frozenset(
        {"gather_object", "all_gather_object", "broadcast_object_list", "scatter_object_list"}
    )

    def __init__(self, dist: Any) -> None:
        self._dist = dist

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._dist, name)
        if name in self._IN_PLACE:
            return lambda tensor, *args, **kwargs: self._in_place(found, tensor, *args, **kwargs)
        if name in self._OBJECTS:
            return lambda *args, **kwargs: self._outside_inference(found, *args, **kwargs)
        return found

    @staticmethod
    def _outside_inference(fn: Any, *args: Any, **kwargs: Any) -> Any:
        torch: Any = importlib.import_module("torch")
        with torch.inference_mode(False):
            return fn(*args, **kwargs)

    def _in_place(self, fn: Any, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        torch: Any = importlib.import_module("torch")
        dist = self._dist
        average = kwargs.get("op") == dist.ReduceOp.AVG
        if average:
            kwargs["op"] = dist.ReduceOp.SUM
        with torch.inference_mode(False):
            work = tensor.clone()
            done = fn(work, *args, **kwargs)
            if average:
                work = work / dist.get_world_size()
        with torch.inference_mode(tensor.is_inference()):
            tensor.copy_(work)
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
def validation(validator: Any) -> Iterator[None]:
    """Around a validation pass on CPU ranks: collectives through GlooDist in every module of the
    validator's class that holds torch.distributed, the final validation's model on the CPU."""
    engine: Any = ultra.validator_engine()
    dist = engine.dist
    modules: set[Any] = {engine} | {
        sys.modules[c.__module__] for c in type(validator).__mro__ if c.__module__ in sys.modules
    }
    kept = [(m, "dist", dist) for m in modules if getattr(m, "dist", None) is dist]
    autobackend = engine.AutoBackend
    kept += [
        (engine, "get_torch_device_backend", engine.get_torch_device_backend),
        (engine, "AutoBackend", autobackend),
    ]
    for module, name, _ in kept:
        if name == "dist":
            module.dist = GlooDist(dist)
    engine.get_torch_device_backend = lambda _device: _CpuBackend
    engine.AutoBackend = lambda *args, **kwargs: autobackend(*args, **_on_cpu(**kwargs))
    try:
        yield
    finally:
        for module, name, value in kept:
            setattr(module, name, value)
