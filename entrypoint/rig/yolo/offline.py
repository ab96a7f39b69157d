"""Offline by default: a missing weight or dataset is one line naming where to put it.

Ultralytics, offline, answers a missing `yolo11n.pt` or `coco8.yaml` with a download traceback.
These checks run first, in `rig yolo ...` (and any rig command that takes model= or data=), using
the same places Ultralytics looks: the path as given, then the baked settings' weights_dir and
datasets_dir (the `weights` and `datasets` volumes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from rig import log
from rig.errors import RigError
from rig.yolo import datasets, ultra

_logger = log.get("yolo")

WEIGHT_SUFFIXES = (".pt", ".pth", ".onnx", ".engine", ".torchscript", ".safetensors")


def missing_weights(model: str, weights_dir: Path) -> str | None:
    """The one-line problem with model=, or None when it is there (or is an architecture yaml)."""
    path = Path(model)
    if path.suffix.lower() not in WEIGHT_SUFFIXES or model.startswith(("http://", "https://")):
        return None
    if path.exists() or (not path.is_absolute() and (weights_dir / path).exists()):
        return None
    where = path if path.is_absolute() or len(path.parts) > 1 else weights_dir / path.name
    return (
        f"weights {model} not found and this container is offline: put the file at {where} "
        f"(the `weights` volume; `make weights W={path.name}` fetches it), "
        f"or build the image with RIG_WEIGHTS={path.name}"
    )


def missing_data(data: str, datasets_dir: Path) -> str | None:
    """The one-line problem with data=, or None when its yaml and train images are there."""
    yaml_path = datasets.locate(data, datasets_dir)
    if yaml_path is None or yaml_path.is_dir():
        where = datasets.candidates(data, datasets_dir)[-1]
        return f"dataset yaml {data} not found: put it at {where} or pass data=/path/to/data.yaml"
    try:
        spec = datasets.load(yaml_path, datasets_dir)
    except datasets.DatasetError as e:
        return f"dataset yaml {e}"
    missing = spec.missing_train()
    if missing is not None:
        return (
            f"dataset {yaml_path.name}: {missing} does not exist and this container is offline: "
            f"put the dataset under {spec.root} (the `datasets` volume), or make one with `rig demo-data`"
        )
    return None


def check_args(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> None:
    """Raise RigError for the first missing model=/data= among Ultralytics key=value arguments."""
    dirs = ultra.settings_dirs(environ)
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    problems = [
        missing_weights(kv["model"], dirs["weights_dir"]) if "model" in kv else None,
        missing_data(kv["data"], dirs["datasets_dir"]) if "data" in kv else None,
    ]
    for problem in problems:
        if problem:
            raise RigError(problem)
