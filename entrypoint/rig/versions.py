"""The image's stack, read from installed package metadata (no heavy imports), and the table of
the stacks yolo-rig builds (`make build STACK=...`), for `rig doctor` to name the one a GPU needs."""

import os
import platform
from dataclasses import dataclass
from importlib import metadata

from rig import __version__


@dataclass(frozen=True)
class Stack:
    name: str  # pyproject.toml's extra and the image tag: yolo-rig:<name>
    cuda: str
    min_driver: str  # the CUDA toolkit's minimum Linux driver (NVIDIA's CUDA release notes, table 3)
    # The GPU code torch was built with, as torch._C._cuda_getArchFlags() lists it in that image
    # (tests/image checks this table against the image).
    archs: tuple[str, ...]


# In the order `rig doctor` recommends them: the default first.
STACKS: tuple[Stack, ...] = (
    Stack("cu121", "12.1", "530.30.02", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")),
    Stack("cu128", "12.8", "570.26", ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
)
DEFAULT_STACK = STACKS[0].name


STACK_ENV = "RIG_STACK"  # baked by the Dockerfile: the stack this image was built for


def stack_named(name: str) -> Stack | None:
    return next((s for s in STACKS if s.name == name), None)


def image_stack() -> str:
    """The stack this image was built for (the Dockerfile bakes RIG_STACK); 'unknown' outside it."""
    return os.environ.get(STACK_ENV, "unknown")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def stack() -> dict[str, str]:
    cuda_runtime = _version("nvidia-cuda-runtime-cu12")
    return {
        "yolo-rig": __version__,
        "stack": image_stack(),
        "revision": os.environ.get("RIG_GIT_REVISION", "unknown"),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "torchvision": _version("torchvision"),
        "cuda": ".".join(cuda_runtime.split(".")[:2]) if cuda_runtime[0].isdigit() else cuda_runtime,
        "cudnn": _version("nvidia-cudnn-cu12"),
        "ultralytics": _version("ultralytics-opencv-headless"),
        "opencv": _version("opencv-python-headless"),
    }


def describe() -> str:
    s = stack()
    return (
        f"yolo-rig {s['yolo-rig']} (stack {s['stack']}, revision {s['revision']}): python {s['python']}, "
        f"torch {s['torch']}, torchvision {s['torchvision']}, CUDA {s['cuda']}, cuDNN {s['cudnn']}, "
        f"ultralytics {s['ultralytics']}, opencv {s['opencv']}"
    )
