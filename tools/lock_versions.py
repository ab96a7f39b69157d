"""Print the image's stack versions, read from uv.lock, as `make` variable assignments.

The Makefile passes them to `docker build` as OCI labels, and the tests compare them with what
the built image reports: one source of truth for "which versions are in this image".
"""

import sys
import tomllib
from pathlib import Path


def stack_versions(lock_path: Path) -> dict[str, str]:
    packages = {p["name"]: p["version"] for p in tomllib.loads(lock_path.read_text())["package"]}
    cuda_runtime = packages["nvidia-cuda-runtime-cu12"]
    return {
        "TORCH_VERSION": packages["torch"],
        "TORCHVISION_VERSION": packages["torchvision"],
        "ULTRALYTICS_VERSION": packages["ultralytics-opencv-headless"],
        "CUDNN_VERSION": packages["nvidia-cudnn-cu12"],
        "CUDA_VERSION": ".".join(cuda_runtime.split(".")[:2]),
    }


if __name__ == "__main__":
    lock = Path(sys.argv[1] if len(sys.argv) > 1 else "uv.lock")
    for key, value in stack_versions(lock).items():
        print(f"{key}={value}")
