"""The image's stack, read from installed package metadata (no heavy imports)."""

import os
import platform
from importlib import metadata

from rig import __version__


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def stack() -> dict[str, str]:
    cuda_runtime = _version("nvidia-cuda-runtime-cu12")
    return {
        "yolo-rig": __version__,
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
        f"yolo-rig {s['yolo-rig']} (revision {s['revision']}): python {s['python']}, "
        f"torch {s['torch']}, torchvision {s['torchvision']}, CUDA {s['cuda']}, cuDNN {s['cudnn']}, "
        f"ultralytics {s['ultralytics']}, opencv {s['opencv']}"
    )
