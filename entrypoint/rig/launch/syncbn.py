"""SyncBatchNorm for `rig train sync_bn=True`: the model trains with it, nothing saved holds it.

Under DDP each rank normalises with its own batch's statistics; SyncBatchNorm all-reduces them, so a
BatchNorm layer sees the global batch (it pays when the per-GPU batch is small). The model's
BatchNorm2d layers are swapped for SyncBatchNorm before the DDP wrap and the EMA's are swapped back,
sharing the same parameters and buffers both ways (the weights are the weights). The EMA is what
Ultralytics saves, so last.pt and best.pt hold plain BatchNorm2d: a checkpoint with SyncBatchNorm
could not be fine-tuned later on one GPU or the CPU. Two Ultralytics steps assume BatchNorm2d and
are kept true here: frozen layers' norms stay in eval (keep_frozen_in_eval), and the EMA that resume
and NaN recovery make again from the model is converted back too (rig.launch.trainer).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from rig.launch.levers import SYNC_BN_ENV


def wanted(environ: Mapping[str, str]) -> bool:
    return environ.get(SYNC_BN_ENV, "").strip() == "1"


def _swap(module: Any, source: Any, make: Any) -> tuple[Any, int]:
    """module with every `source` layer replaced by make(layer), sharing its tensors; and how many."""
    torch: Any = importlib.import_module("torch")
    out, count = module, 0
    if type(module) is source:
        out = make(module)
        if module.affine:
            with torch.no_grad():
                out.weight, out.bias = module.weight, module.bias
        out.running_mean, out.running_var = module.running_mean, module.running_var
        out.num_batches_tracked = module.num_batches_tracked
        out.training = module.training
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
        count = 1
    for name, child in module.named_children():
        new, n = _swap(child, source, make)
        if new is not child:
            out.add_module(name, new)
        count += n
    return out, count


def _same_args(bn: Any) -> tuple[Any, ...]:
    return bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats


def to_sync_batchnorm(model: Any) -> tuple[Any, int]:
    """Every BatchNorm2d of model as a SyncBatchNorm over the default process group (torch's own
    convert_sync_batchnorm would convert 1d and 3d layers too, and nothing says which to restore)."""
    nn: Any = importlib.import_module("torch.nn")
    return _swap(model, nn.BatchNorm2d, lambda bn: nn.SyncBatchNorm(*_same_args(bn)))


def to_batchnorm(model: Any) -> tuple[Any, int]:
    """The reverse: every SyncBatchNorm as a BatchNorm2d (the only kind to_sync_batchnorm makes)."""
    nn: Any = importlib.import_module("torch.nn")
    return _swap(model, nn.SyncBatchNorm, lambda bn: nn.BatchNorm2d(*_same_args(bn)))


def keep_frozen_in_eval(model: Any, frozen_names: Sequence[str]) -> int:
    """What Ultralytics' _model_train does for BatchNorm2d, for the SyncBatchNorm layers of the frozen
    layers (freeze=N): eval, so their running statistics stay the pretrained ones. Returns how many."""
    nn: Any = importlib.import_module("torch.nn")
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.SyncBatchNorm) and any(f in name for f in frozen_names):
            module.eval()
            count += 1
    return count


# The torch releases whose graph breaks were counted (issue 21 item 13: torch 2.3.1, two ranks, a
# two-layer model: 7 graphs, each SyncBatchNorm breaking the graph). No other release could be counted
# here: SyncBatchNorm refuses CPU tensors (ValueError) and aten::batch_norm_stats has no CPU kernel in
# torch 2.3.1 nor 2.9.1, so only tools/syncbn_graph_breaks.py on a GPU counts a newer torch.
MEASURED_RELEASES = ("2.3.",)


def compile_warning(layers: int, compile_value: Any, torch_version: str) -> str | None:
    """What sync_bn costs torch.compile (compile= as Ultralytics reads it; None: not compiled).

    SyncBatchNorm's training forward runs its statistics through collectives inside a custom autograd
    Function, which torch 2.3's dynamo does not trace: each layer breaks the graph (at least once), and
    every step returns to Python between the compiled pieces. For a torch whose breaks were never
    counted the WARNING says so instead of a number."""
    if not compile_value:
        return None
    head = f"sync_bn=True with compile={compile_value}: "
    if torch_version.startswith(MEASURED_RELEASES):
        return head + (
            f"torch {torch_version} does not compile SyncBatchNorm; dynamo breaks the model's graph "
            f"at each of its {layers} SyncBatchNorm layers (at least {layers} graph breaks, {layers + 1} "
            "or more compiled pieces with Python between them at every step), so compile gains little here: "
            "measure with `rig bench --compile`, or train with one of the two"
        )
    return head + (
        f"what torch {torch_version} compiles of SyncBatchNorm was not measured (torch 2.3 breaks the "
        f"graph at each SyncBatchNorm layer: {layers} graph breaks for this model, {layers + 1} or more "
        "compiled pieces with Python between them at every step; tools/syncbn_graph_breaks.py "
        "counts them for this torch on a GPU): measure with `rig bench --compile`, or train with one of "
        "the two"
    )
