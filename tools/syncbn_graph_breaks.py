"""How many graph breaks SyncBatchNorm costs torch.compile with the torch installed here, on one GPU
(`python tools/syncbn_graph_breaks.py`, PYTHONPATH=entrypoint; rig's WARNING for sync_bn with compile
names it for a torch whose count was not measured).

SyncBatchNorm refuses CPU tensors, and a one-rank group skips its synchronisation, so the check runs
on the GPU in a fake two-rank process group (torch's own test backend: the code path is the one two
real ranks run). That backend's all_gather_into_tensor does not fill a gather of two (torch 2.11:
"size of tensor a (34) must match ... (17)"), so the gather hands back this rank's statistics twice,
what two ranks with the same batch would gather. It counts dynamo's graphs and breaks for a
two-layer model and, where Ultralytics is importable, for YOLO11n, and compares with the plain
BatchNorm2d model. Prints SYNCBN lines. Exit 0 when it measured and, on the torch whose breaks rig's
WARNING states (rig.launch.syncbn.MEASURED_RELEASES: one per SyncBatchNorm layer at least), the count
agrees; on any other torch the counts are the result (the WARNING says they were not measured):
record them. 1 when the count contradicts the WARNING; 2 when it could not measure (the caller skips).
A caveat the counts carry: the fake group's all-gather is a Python stand-in that dynamo may trace,
where two real GPUs run a collective. Measured on torch 2.11 (H200, 2026-11-30): 2-layer model 0
breaks, YOLO11n 26 breaks for 81 layers (BENCHMARKS.md).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend


def explain(model: nn.Module, x: torch.Tensor) -> tuple[int, int, list[str]]:
    torch._dynamo.reset()
    ex = torch._dynamo.explain(model)(x)
    return (
        ex.graph_count,
        ex.graph_break_count,
        sorted({r.reason.splitlines()[0][:160] for r in ex.break_reasons}),
    )


def layers(model: nn.Module) -> int:
    return sum(isinstance(m, nn.SyncBatchNorm) for m in model.modules())


def measure(name: str, plain: nn.Module, x: torch.Tensor) -> bool:
    graphs0, breaks0, _ = explain(plain, x)
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(plain).train()
    graphs, breaks, reasons = explain(sync, x)
    n = layers(sync)
    print(
        f"SYNCBN torch {torch.__version__} {name}: {n} SyncBatchNorm layers: {graphs} graphs, "
        f"{breaks} breaks (BatchNorm2d: {graphs0} graphs, {breaks0} breaks)",
        flush=True,
    )
    for reason in reasons[:5]:
        print(f"  break: {reason}", flush=True)
    from rig.launch.syncbn import MEASURED_RELEASES

    if not torch.__version__.startswith(MEASURED_RELEASES):
        print(
            f"SYNCBN {name}: rig's WARNING states no count for torch {torch.__version__}: recorded",
            flush=True,
        )
        return True
    return breaks - breaks0 >= n


def _gather_twice(
    output: torch.Tensor, tensor: torch.Tensor, group: Any = None, async_op: bool = False
) -> Any:
    output.copy_(torch.cat([tensor] * dist.get_world_size(group)))
    return None


def main() -> int:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    dist.all_gather_into_tensor = _gather_twice  # type: ignore[assignment]  # as SyncBatchNorm calls it
    dev = torch.device("cuda")
    small = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8)
    )
    ok = measure("2-layer", small.to(dev).train(), torch.randn(4, 3, 32, 32, device=dev))
    try:
        from ultralytics.nn.tasks import DetectionModel
    except ImportError:
        print("SYNCBN yolo11n skipped: ultralytics is not importable", flush=True)
    else:
        model: Any = DetectionModel("yolo11n.yaml", verbose=False).to(dev).train()
        ok = measure("yolo11n", model, torch.randn(2, 3, 320, 320, device=dev)) and ok
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the measurement itself failed: say why, let the caller skip
        print(f"SYNCBN not measured with torch {torch.__version__}: {type(e).__name__}: {e}", flush=True)
        sys.exit(2)
