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

from rig.yolo import contract, ultra


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
    parallel = ultra.torch_parallel()
    with ultra.swapped(
        contract.TorchParallel,
        parallel,
        DistributedDataParallel=cpu_ddp_class(parallel.DistributedDataParallel),
    ):
        yield


@contextlib.contextmanager
def validation(validator: contract.Validator) -> Iterator[None]:
    """Around a validation pass on CPU ranks: collectives through GlooDist in the validator's module
    and the task's validation modules (their `dist`), the final validation's model on the CPU."""
    engine = ultra.engine_validator()
    dist = engine.dist
    autobackend = engine.AutoBackend
    with contextlib.ExitStack() as fixes:
        fixes.enter_context(
            ultra.swapped(
                contract.EngineValidator,
                engine,
                dist=GlooDist(dist),
                get_torch_device_backend=lambda _device: _CpuBackend,
                AutoBackend=lambda *args, **kwargs: autobackend(*args, **_on_cpu(**kwargs)),
            )
        )
        for task in ultra.task_validators():
            if getattr(task, "dist", None) is dist:
                fixes.enter_context(ultra.swapped(contract.TaskValidator, task, dist=GlooDist(dist)))
        yield
