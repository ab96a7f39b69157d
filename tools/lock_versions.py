"""Print one stack's versions, read from uv.lock, as `make` variable assignments.

Usage: python3 tools/lock_versions.py uv.lock STACK   (STACK: an extra of pyproject.toml, e.g. cu128)

The Makefile passes them to `docker build` as OCI labels, and the tests compare them with what
the built image reports: one source of truth for "which versions are in this image". The lock
holds every stack (uv's conflicting extras), so a package can appear in several versions; each
is found by following the lock's edges from the stack's extra (the stack's torch names its CUDA
runtime and cuDNN), never by guessing. Standard library only: `make build` runs it with the
host's python3.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

PROJECT = "yolo-rig"


class LockError(Exception):
    """The lock does not hold what the stack needs: one line for the user."""


def _packages(lock: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for p in lock["package"]:
        by_name.setdefault(p["name"], []).append(p)
    return by_name


def _follow(
    by_name: dict[str, list[dict[str, Any]]], deps: list[dict[str, Any]], name: str
) -> dict[str, Any]:
    """The package `name` as one of `deps` points to it: the version the edge names, else the only one."""
    for dep in deps:
        if dep["name"] != name:
            continue
        candidates = by_name[name]
        if "version" in dep:
            candidates = [p for p in candidates if p["version"] == dep["version"]]
        if len(candidates) == 1:
            return candidates[0]
        raise LockError(f"uv.lock holds {len(candidates)} versions of {name} and the edge names none")
    raise LockError(f"{name} is not a dependency here in uv.lock")


def stacks(lock: dict[str, Any]) -> list[str]:
    """The stacks the lock was resolved for: the project's extras."""
    (project,) = (p for p in lock["package"] if p["name"] == PROJECT)
    return sorted(project.get("optional-dependencies", {}))


def stack_versions(lock_path: Path, stack: str) -> dict[str, str]:
    lock = tomllib.loads(lock_path.read_text())
    by_name = _packages(lock)
    known = stacks(lock)
    if stack not in known:
        raise LockError(f"STACK={stack} is not a stack in {lock_path} (one of: {', '.join(known)})")
    (project,) = by_name[PROJECT]
    extra = project["optional-dependencies"][stack]
    torch = _follow(by_name, extra, "torch")
    cuda_runtime = _follow(by_name, torch["dependencies"], "nvidia-cuda-runtime-cu12")
    return {
        "TORCH_VERSION": torch["version"],
        "TORCHVISION_VERSION": _follow(by_name, extra, "torchvision")["version"],
        "ULTRALYTICS_VERSION": _follow(by_name, project["dependencies"], "ultralytics-opencv-headless")[
            "version"
        ],
        "CUDNN_VERSION": _follow(by_name, torch["dependencies"], "nvidia-cudnn-cu12")["version"],
        "CUDA_VERSION": ".".join(cuda_runtime["version"].split(".")[:2]),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: lock_versions.py uv.lock STACK", file=sys.stderr)
        return 2
    try:
        versions = stack_versions(Path(argv[0]), argv[1])
    except LockError as e:
        print(f"ERROR make: {e}", file=sys.stderr)
        return 1
    for key, value in versions.items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
