"""The per-GPU batch `rig train` picks when no batch= is given: as many images as the GPU's memory holds
for the model, never more than Ultralytics' nominal batch (`nbs`).

Why: the step's host side (Python, kernel launches, the optimizer and EMA) costs the same per step
whatever the batch, so a GPU fed 16 images per step idles most of it (an H200 ran YOLO11n at 640 px
263 img/s at batch 16, 689 at 64). Ultralytics accumulates gradients up to `nbs` (64) images per
optimizer step, so any batch that divides `nbs` makes the same optimizer steps as its default 16
(only BatchNorm's statistics see more images at once); above `nbs` the recipe would change, so the
batch stops there.

The memory model follows Ultralytics' AutoBatch (ultralytics.utils.autobatch): memory grows linearly
with the batch, and a run may plan on 60 % of the GPU's free memory (AutoBatch's default fraction),
the rest left to the caching allocator's slack, cuDNN's workspaces and validation. The slope per image
is PER_IMAGE_MIB (a train step's memory per image at 640 px, measured on the CPU by
tools/measure_activation_bytes.py: autograd's saved tensors and the peak of the backward pass, scaled
to 2-byte activations for AMP) plus AutoBatch's own envelope of the detection loss; the intercept is the
model's weights, gradients, optimizer state and EMA, and the CUDA context. AutoBatch itself cannot be
used at launch: it profiles on the GPU inside the trainer, one GPU only, and without a cap at `nbs`.

Discovery (NVML, the data yaml) takes its sources as parameters; `decide` is pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.hardware import nvml
from rig.hardware.topology import normalize_bus_id
from rig.yolo import datasets, tuning, ultra

GIB = 1 << 30
MIB = 1 << 20
# Per image at 640 px, (AMP, fp32), MiB: tools/measure_activation_bytes.py in the image (torch 2.3.1,
# Ultralytics 8.4.190, CPU), at 320 px times 4 (activations grow with the pixels; YOLO11s at 640 px),
# BENCHMARKS.md "The GPU never waits". YOLO26 (its end-to-end head: a one-to-one branch beside the
# one-to-many one, and two task-aligned assignments in its loss) the larger of that and its own 640-px
# peak, the largest of three runs: YOLO26s's 640-px peak is 7 % above its 320-px figure times 4.
# Detection models only: the other tasks' heads and losses (masks, keypoints) were not measured.
PER_IMAGE_MIB: dict[str, tuple[int, int]] = {
    "yolo11n": (152, 292),
    "yolo11s": (273, 536),
    "yolo11m": (516, 1020),
    "yolo11l": (648, 1288),
    "yolo11x": (952, 1896),
    "yolo26n": (172, 328),
    "yolo26s": (298, 580),
    "yolo26m": (556, 1098),
    "yolo26l": (648, 1280),
    "yolo26x": (980, 1945),
}
PARAMS_M: dict[str, float] = {  # millions of parameters, from the same measurement
    "yolo11n": 2.6,
    "yolo11s": 9.5,
    "yolo11m": 20.1,
    "yolo11l": 25.4,
    "yolo11x": 57.0,
    "yolo26n": 2.6,
    "yolo26s": 10.0,
    "yolo26m": 21.9,
    "yolo26l": 26.3,
    "yolo26x": 59.0,
}
FRACTION = 0.6  # of the free memory, as Ultralytics' AutoBatch plans (its default fraction)
CONTEXT_MIB = 1024  # the CUDA context, cuBLAS and cuDNN handles: taken before any tensor
BYTES_PER_PARAM = 20  # fp32 weights, gradients, two optimizer moments (AdamW) and the EMA copy
# AutoBatch's envelope of the detection loss per image (ultralytics.utils.torch_utils.profile_ops):
# 6 fp32 values per anchor for each object slot and twice each class; the objects per image are those
# of a crowded image (COCO's train images reach about 90).
MAX_OBJECTS = 100
STRIDES = (8, 16, 32)
_MODEL_NAME = re.compile(r"^(yolo11|yolov8|yolo26)([nsmlx])$")


@dataclass(frozen=True)
class GpuMemory:
    name: str
    total: int  # bytes
    free: int  # bytes, before the run starts


@dataclass(frozen=True)
class BatchChoice:
    per_gpu: int
    reason: str
    measured: bool  # False: Ultralytics' default, for want of a GPU or a figure


# ---------------------------------------------------------------------------------------------
# Decision (pure)


def model_key(model: str) -> str | None:
    """yolo11n for yolo11n.pt, /weights/yolo11n.yaml...; None for a model without a measured figure."""
    stem = Path(model).stem.lower()
    return stem if _MODEL_NAME.match(stem) and stem in PER_IMAGE_MIB else None


def measured_models() -> str:
    """The models with a figure, by family: yolo11n/s/m/l/x, yolo26n/s/m/l/x."""
    families: dict[str, list[str]] = {}
    for key in PER_IMAGE_MIB:
        families.setdefault(key[:-1], []).append(key[-1])
    return ", ".join(f"{family}{'/'.join(scales)}" for family, scales in families.items())


def image_bytes(key: str, imgsz: int, amp: bool, nc: int) -> int:
    """One image's share of a train step's memory at imgsz px: the model's activations (they scale with
    the pixels) and AutoBatch's loss envelope (with the anchors)."""
    amp_mib, fp32_mib = PER_IMAGE_MIB[key]
    activations = (amp_mib if amp else fp32_mib) * MIB * (imgsz / 640) ** 2
    anchors = sum(math.ceil(imgsz / s) ** 2 for s in STRIDES)
    return int(activations + anchors * 6 * (MAX_OBJECTS + 2 * nc) * 4)


def fixed_bytes(key: str) -> int:
    return int(PARAMS_M[key] * 1e6 * BYTES_PER_PARAM + CONTEXT_MIB * MIB)


def _exact(batch: int, world: int, nbs: int) -> int:
    """The largest batch <= batch whose total over the world divides nbs (so Ultralytics' accumulation
    reaches nbs exactly), unless that halves it; else batch."""
    for b in range(batch, 0, -1):
        if nbs % (b * world) == 0:
            return b if 2 * b >= batch else batch
    return batch


def decide(
    *,
    model: str,
    imgsz: int,
    gpus: Sequence[GpuMemory],
    world: int,
    nbs: int,
    amp: bool = True,
    nc: int = 80,
    default: int = ultra.DEFAULT_BATCH,
) -> BatchChoice:
    """The per-GPU batch for `world` ranks on GPUs like `gpus` (this node's; the smallest free memory
    counts), and why."""
    key = model_key(model)
    if key is None:
        return BatchChoice(
            default,
            f"Ultralytics' default {default} per GPU: no memory figure for {Path(model).name} (measured: "
            f"{measured_models()}); give batch= to use more of the GPU",
            False,
        )
    if not gpus:
        return BatchChoice(default, f"Ultralytics' default {default} per GPU: no GPU memory reading", False)
    gpu = min(gpus, key=lambda g: g.free)
    per_image, fixed = image_bytes(key, imgsz, amp, nc), fixed_bytes(key)
    fits = int((gpu.free * FRACTION - fixed) // per_image)
    cap = max(nbs // max(world, 1), 1)
    batch = _exact(max(min(fits, cap), 1), world, nbs)
    total = batch * world
    accumulate = max(round(nbs / total), 1)
    precision = "with AMP" if amp else "in fp32"
    memory = (
        f"{gpu.name} has {gpu.free / GIB:.1f} GiB free; {key} at {imgsz} px {precision} "
        f"takes ~{per_image / GIB:.2f} GiB per image + {fixed / GIB:.1f} GiB fixed, so "
        f"{max(fits, 0)} images fit in {FRACTION:.0%} of it (AutoBatch's share)"
    )
    if fits < 1:
        return BatchChoice(1, f"{memory}: even 1 image may not fit; give a smaller imgsz or model", True)
    steps = f"{total} images x {accumulate} accumulated = {total * accumulate} per optimizer step" + (
        " as in Ultralytics' recipe" if total * accumulate == nbs else f", nbs={nbs}"
    )
    limit = "the memory" if fits < cap else f"nbs={nbs}" + (f" over {world} GPUs" if world > 1 else "")
    return BatchChoice(batch, f"{memory}; {batch} per GPU, bounded by {limit} ({steps})", True)


# ---------------------------------------------------------------------------------------------
# Discovery


def read_all(module: Any | None = None) -> tuple[dict[str, GpuMemory], str]:
    """Every GPU's name and memory, by PCI bus id (sysfs's spelling), from NVML; ({}, why) when it
    cannot tell."""
    with nvml.session(module) as (lib, state):
        if lib is None:
            return {}, state
        try:
            found = {}
            for gpu in lib.gpus():
                total, free = lib.memory(gpu.index)
                found[normalize_bus_id(lib.pci_bus_id(gpu.index))] = GpuMemory(gpu.name, total, free)
        except Exception as e:  # NVML errors: a lost GPU, a driver reload
            return {}, f"NVML cannot read the GPUs' memory ({nvml.describe_error(e)})"
    return found, "ok"


def of_run(every: Mapping[str, GpuMemory], state: str, bus_ids: Sequence[str]) -> tuple[list[GpuMemory], str]:
    """The run's GPUs among every GPU read_all found; ([], why) unless each is there."""
    wanted = [normalize_bus_id(b) for b in bus_ids]
    found = [every[b] for b in wanted if b in every]
    if len(found) < len(wanted):
        return [], state if state != "ok" else "NVML does not see every GPU of the run"
    return found, "ok"


def read_gpus(bus_ids: Sequence[str], module: Any | None = None) -> tuple[list[GpuMemory], str]:
    """The memory of the GPUs with these PCI bus ids, from NVML; ([], why) when it cannot tell."""
    return of_run(*read_all(module), bus_ids)


def classes(data: str | None, datasets_dir: Path) -> int:
    """The data yaml's class count; 80 (COCO's) when it cannot be read."""
    located = datasets.locate(data, datasets_dir) if data else None
    if located is None or not located.is_file():
        return 80
    try:
        names = datasets.read_spec(located).get("names")
    except Exception:  # the dataset check reports a broken yaml; the batch needs only a count
        return 80
    return len(names) if isinstance(names, (list, dict)) and names else 80


def amp_of(args: Mapping[str, str], typed: Any = ultra.smart_value) -> bool:
    """amp= as Ultralytics reads it: on unless False or fp32."""
    return args.get("amp") is None or typed(args["amp"]) not in {False, "fp32", None}


def for_launch(
    args: Mapping[str, str],
    gpus: Sequence[GpuMemory],
    gpu_state: str,
    world: int,
    *,
    nc: int,
    nbs: int,
    typed: Any = ultra.smart_value,
) -> BatchChoice:
    """decide() for `rig train`'s arguments on the run's GPUs (of_run; gpu_state: why none were read)."""
    choice = decide(
        model=args.get("model", "yolo11n.pt"),
        imgsz=tuning.imgsz_of(args),
        gpus=gpus,
        world=world,
        nbs=nbs,
        amp=amp_of(args, typed),
        nc=nc,
    )
    if not gpus and choice.reason.endswith("no GPU memory reading"):
        return BatchChoice(choice.per_gpu, f"{choice.reason} ({gpu_state})", False)
    return choice
