"""Offline by default: a missing weight or dataset is one line naming where to put it.

Ultralytics, offline, answers a missing `yolo11n.pt` or `coco8.yaml` with a download traceback.
These checks run first, in `rig yolo ...` (and any rig command that takes model= or data=), using
the same places Ultralytics looks: the path as given, then the baked settings' weights_dir and
datasets_dir (the `weights` and `datasets` volumes).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from rig import log
from rig.errors import RigError

_logger = log.get("yolo")

WEIGHT_SUFFIXES = (".pt", ".pth", ".onnx", ".engine", ".torchscript", ".safetensors")
_DEFAULTS = {"weights_dir": "/weights", "datasets_dir": "/datasets"}


def settings_dirs(environ: Mapping[str, str] = os.environ) -> dict[str, Path]:
    """weights_dir and datasets_dir from the baked Ultralytics settings (without importing it)."""
    values = dict(_DEFAULTS)
    cfg = environ.get("YOLO_CONFIG_DIR")
    if cfg:
        with contextlib.suppress(OSError, ValueError):
            values.update(json.loads((Path(cfg) / "Ultralytics/settings.json").read_text()))
    return {k: Path(str(values[k])) for k in _DEFAULTS}


def _packaged_yaml(name: str) -> Path | None:
    """A dataset yaml shipped inside Ultralytics (coco8.yaml ...), found without importing it."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("ultralytics")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        hits = list((Path(root) / "cfg/datasets").rglob(Path(name).name))
        if hits:
            return hits[0]
    return None


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
    given = Path(data)
    candidates = [given] if given.is_absolute() else [given, datasets_dir / given]
    yaml_path = next((p for p in candidates if p.is_file()), None)
    if yaml_path is None:
        packaged = _packaged_yaml(data) if not given.is_absolute() and len(given.parts) == 1 else None
        if packaged is None:
            return (
                f"dataset yaml {data} not found: put it at {candidates[-1]} or pass data=/path/to/data.yaml"
            )
        yaml_path = packaged
    try:
        spec = yaml.safe_load(yaml_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        return f"dataset yaml {yaml_path} is unreadable: {e}".replace("\n", " ")
    if not isinstance(spec, dict) or "train" not in spec:
        return f"dataset yaml {yaml_path} has no 'train:' entry"
    root = Path(str(spec.get("path") or yaml_path.parent))
    if not root.is_absolute():
        root = datasets_dir / root
    train = spec["train"]
    first = Path(str(train[0] if isinstance(train, list) else train))
    train_path = first if first.is_absolute() else root / first
    if not train_path.exists():
        return (
            f"dataset {yaml_path.name}: {train_path} does not exist and this container is offline: "
            f"put the dataset under {root} (the `datasets` volume), or make one with `rig demo-data`"
        )
    return None


def check_args(args: Sequence[str], environ: Mapping[str, str] = os.environ) -> None:
    """Raise RigError for the first missing model=/data= among Ultralytics key=value arguments."""
    dirs = settings_dirs(environ)
    kv = dict(a.split("=", 1) for a in args if "=" in a)
    problems = [
        missing_weights(kv["model"], dirs["weights_dir"]) if "model" in kv else None,
        missing_data(kv["data"], dirs["datasets_dir"]) if "data" in kv else None,
    ]
    for problem in problems:
        if problem:
            raise RigError(problem)
