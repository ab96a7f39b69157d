"""The two speed levers `rig train` decides on before anything runs: torch.compile and SyncBatchNorm.

compile= is Ultralytics' own argument and reaches it unchanged; on the CPU it costs far more than it
gains, which is said once. sync_bn= is rig's: Ultralytics has no such argument, so it is taken out of
the arguments here and reaches the trainer as RIG_SYNC_BN=1, only where there is more than one rank to
share BatchNorm statistics with (rig.launch.syncbn converts the model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rig.yolo import ultra

SYNC_BN_ENV = "RIG_SYNC_BN"  # read by the trainer: "1" converts the model's BatchNorm layers

# Measured in the image on the 2-CPU CI box (BENCHMARKS.md, "torch.compile"): a one-epoch run of
# YOLO11n at 64 px on 16 images took 5.9 s eager, 323 s compiled with an empty cache, 50 s with the
# cache volume of a first run.
CPU_COMPILE_WARNING = (
    "compile={value} on the CPU: measured 55x slower for a tiny run on this image's CPU path (8x once "
    "the cache volume holds its kernels): inductor builds C++ kernels for minutes before the first "
    "batch, and they gain little on a CPU; going on compiled; compile=False trains sooner"
)


@dataclass(frozen=True)
class Levers:
    """What the levers add: the arguments Ultralytics gets, the trainer's environment, what to say."""

    args: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def switched_on(raw: str | None, typed: Callable[[str], Any] = ultra.smart_value) -> bool:
    """Whether key=raw asks for the lever, as Ultralytics reads it: True, 1 or a compile mode
    ('default', 'max-autotune'...) yes; False, 0, none, empty or absent no."""
    return raw is not None and bool(typed(raw))


def decide(
    user_args: Mapping[str, str], *, world: int, cpu: bool, typed: Callable[[str], Any] = ultra.smart_value
) -> Levers:
    """The levers for a run of `world` ranks (cpu: on CPU ranks). A pure function of its arguments."""
    args = {k: v for k, v in user_args.items() if k != "sync_bn"}
    warnings: list[str] = []
    if cpu and switched_on(args.get("compile"), typed):
        warnings.append(CPU_COMPILE_WARNING.format(value=args["compile"]))
    env: dict[str, str] = {}
    if switched_on(user_args.get("sync_bn"), typed):
        if cpu:
            warnings.append(
                "sync_bn=True ignored: device=cpu, and torch's SyncBatchNorm takes GPU tensors only "
                "(CPU ranks keep a BatchNorm of their own)"
            )
        elif world <= 1:
            warnings.append(
                "sync_bn=True ignored: one rank, with no other GPU to share BatchNorm statistics with; "
                "it pays with several GPUs and small per-GPU batches"
            )
        else:
            env[SYNC_BN_ENV] = "1"
    return Levers(args, env, tuple(warnings))
