"""The image's stack, read from installed package metadata (no heavy imports), and the table of
the stacks yolo-rig builds (`make build STACK=...`), for `rig doctor` to name the one a GPU needs.

`rig --version` prints it, so this module stays light: a NamedTuple (no dataclasses), and the
versions read from the .dist-info folders' names, which the packaging spec fixes as
`{name}-{version}.dist-info` (importlib.metadata alone costs more than a bare Python's start)."""

import os
import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

from rig import __version__, origins


class Stack(NamedTuple):
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


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def dist_info_versions(path: list[str]) -> dict[str, str]:
    """Each installed distribution's version, by normalized name, from the .dist-info folders on
    `path`; the first one found wins, as for imports."""
    found: dict[str, str] = {}
    for folder in path:
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in entries:
            name, dash, version = entry.removesuffix(".dist-info").partition("-")
            if entry.endswith(".dist-info") and dash and version:
                found.setdefault(_normalized(name), version)
    return found


def installed_version(dist: str, installed: dict[str, str]) -> str:
    """`dist`'s version: from `installed` (dist_info_versions), else importlib.metadata's."""
    if (version := installed.get(_normalized(dist))) is not None:
        return version
    # Not installed as a wheel (an .egg-info, a zip): importlib.metadata knows every other way.
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def ultralytics(environ: Mapping[str, str] | None = None, euid: int | None = None) -> dict[str, str]:
    """The Ultralytics a session imports (PYTHONPATH first: a user's own in ~/.local wins; root's
    never) and the image's, each as version and folder (rig.origins; neither is imported)."""
    environ = os.environ if environ is None else environ
    found = {}
    for key, path in (
        ("ultralytics", origins.session_path(environ, sys.path, euid)),
        ("image_ultralytics", origins.image_path(environ, sys.path)),
    ):
        origin = origins.find("ultralytics", path)
        found[key] = origin.version if origin else "not installed"
        found[key + "_path"] = origin.path if origin else ""
    return found


def stack() -> dict[str, str]:
    installed = dist_info_versions(sys.path)

    def _version(dist: str) -> str:
        return installed_version(dist, installed)

    cuda_runtime = _version("nvidia-cuda-runtime-cu12")
    return {
        "yolo-rig": __version__,
        "stack": image_stack(),
        "revision": os.environ.get("RIG_GIT_REVISION", "unknown"),
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "torchvision": _version("torchvision"),
        "cuda": ".".join(cuda_runtime.split(".")[:2]) if cuda_runtime[0].isdigit() else cuda_runtime,
        "cudnn": _version("nvidia-cudnn-cu12"),
        **ultralytics(),
        "opencv": _version("opencv-python-headless"),
    }


def describe() -> str:
    s = stack()
    where = ""
    if s["ultralytics_path"]:
        where = f" (ultralytics from {s['ultralytics_path']}"
        if s["image_ultralytics_path"] and s["ultralytics_path"] != s["image_ultralytics_path"]:
            where += f", not the image's {s['image_ultralytics']} from {s['image_ultralytics_path']}"
        where += ")"
    return (
        f"yolo-rig {s['yolo-rig']} (stack {s['stack']}, revision {s['revision']}): python {s['python']}, "
        f"torch {s['torch']}, torchvision {s['torchvision']}, CUDA {s['cuda']}, cuDNN {s['cudnn']}, "
        f"ultralytics {s['ultralytics']}, opencv {s['opencv']}{where}"
    )
