"""Ultralytics behind one boundary: every other part of rig asks here, so an upgrade touches rig.yolo.

What rig needs from it: its settings' directories (read from the settings.json Ultralytics reads,
without importing it), its defaults, its CLI value rule (`smart_value`), its image suffixes, its
dataset check, its classes and builders. Ultralytics imports torch, so nothing is imported before it
is asked for; on a host without Ultralytics (the unit tests) `optional` is the one fallback: the
copies below are Ultralytics 8.4's, and an image test checks they still equal the real ones.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rig import paths
from rig.yolo import settings

PACKAGE = "ultralytics"

# Ultralytics' defaults (cfg/default.yaml) that rig's decisions start from.
DEFAULT_IMGSZ = 640
DEFAULT_BATCH = 16
# Ultralytics' defaults rig reads where Ultralytics is not installed (the host's tests).
_DEFAULTS_FALLBACK: dict[str, Any] = {
    "imgsz": DEFAULT_IMGSZ,
    "batch": DEFAULT_BATCH,
    "epochs": 100,
    "nbs": 64,
}

# Ultralytics 8.4's IMG_FORMATS (ultralytics/data/utils.py), lower case, no dot.
IMG_FORMATS_FALLBACK = frozenset(
    {"avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp"}
)

# The directories of the image's baked settings (docker/ultralytics-settings.py) where there is no file.
_DIRS_FALLBACK = {"weights_dir": str(paths.WEIGHTS), "datasets_dir": str(paths.DATASETS), "runs_dir": "runs"}


def module(name: str = "") -> Any:
    """ultralytics, or its submodule `name` ("data.utils"), imported now (it imports torch)."""
    return importlib.import_module(f"{PACKAGE}.{name}" if name else PACKAGE)


def optional(name: str = "") -> Any | None:
    """As `module`, or None on a host without Ultralytics: the one fallback."""
    try:
        return module(name)
    except ImportError:
        return None


def package_dirs() -> list[Path]:
    """Where the installed package lies, found without importing it ([] when not installed)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def version() -> str:
    """The installed Ultralytics' version, "" without one."""
    found = optional()
    return str(getattr(found, "__version__", "")) if found is not None else ""


def settings_dirs(environ: Mapping[str, str] = os.environ) -> dict[str, Path]:
    """weights_dir, datasets_dir and runs_dir of the settings.json Ultralytics reads under this
    environment (rig.yolo.settings), read without importing it: the one reader of these folders."""
    values = dict(_DIRS_FALLBACK)
    with contextlib.suppress(OSError, ValueError, TypeError):
        values.update(json.loads(settings.settings_file(environ).read_text()))
    dirs = {k: Path(str(values[k])) for k in _DIRS_FALLBACK}
    dirs["runs_dir"] = dirs["runs_dir"].absolute()  # Ultralytics' own default is relative to where it runs
    return dirs


def datasets_dir(environ: Mapping[str, str] = os.environ, root: Path = Path("/")) -> Path:
    """The datasets folder, as seen from root (a copy of a machine's file system in the tests)."""
    found = settings_dirs(environ)["datasets_dir"]
    return root / found.relative_to(found.anchor) if found.is_absolute() else found


def default(key: str) -> Any:
    """Ultralytics' default for a training argument (its DEFAULT_CFG_DICT, the image's overlay in it)."""
    utils = optional("utils")
    if utils is None:
        return _DEFAULTS_FALLBACK[key]
    return utils.DEFAULT_CFG_DICT.get(key, _DEFAULTS_FALLBACK.get(key))


def _plain_value(text: str) -> Any:
    """smart_value for the values rig reads itself (switches, numbers), without Ultralytics."""
    low = text.strip().lower()
    if low in {"true", "false", "none"}:
        return {"true": True, "false": False, "none": None}[low]
    return int(low) if low.lstrip("-").isdigit() else text


def smart_value(text: str) -> Any:
    """A key=value argument's value typed by Ultralytics' own CLI rule ('True' -> True, '16' -> 16,
    'none' -> None)."""
    cfg = optional("cfg")
    return (cfg.smart_value if cfg is not None else _plain_value)(text)


@functools.cache
def image_formats() -> frozenset[str]:
    """Ultralytics' image suffixes (lower case, no dot)."""
    utils = optional("data.utils")
    return IMG_FORMATS_FALLBACK if utils is None else frozenset(utils.IMG_FORMATS)


def check_dataset(data: str, task: str = "detect") -> dict[str, Any] | None:
    """Ultralytics' dataset check (it downloads what the yaml says and fails on what is missing);
    the checked dataset, or None without Ultralytics."""
    utils = optional("data.utils")
    if utils is None:
        return None
    return (utils.check_cls_dataset if task == "classify" else utils.check_det_dataset)(data)  # type: ignore[no-any-return]


# Its classes and builders, for the modules that train or measure with them.


def default_cfg() -> dict[str, Any]:
    """Ultralytics' DEFAULT_CFG_DICT: every training argument's default."""
    return module("cfg").DEFAULT_CFG_DICT  # type: ignore[no-any-return]


def get_cfg(overrides: Mapping[str, Any]) -> Any:
    return module("cfg").get_cfg(overrides=dict(overrides))


def build_yolo_dataset(cfg: Any, img_path: str, batch: int, data: Mapping[str, Any], **kwargs: Any) -> Any:
    return module("data").build_yolo_dataset(cfg, img_path, batch, data, **kwargs)


def build_dataloader(dataset: Any, batch: int, workers: int, **kwargs: Any) -> Any:
    return module("data").build_dataloader(dataset, batch, workers, **kwargs)


def detection_model(cfg: str, nc: int) -> Any:
    return module("nn.tasks").DetectionModel(cfg, nc=nc, verbose=False)


def model_ema(model: Any) -> Any:
    """Ultralytics' EMA of a model, as its trainer keeps one."""
    return module("utils.torch_utils").ModelEMA(model)


def init_seeds(seed: int, deterministic: bool) -> None:
    module("utils.torch_utils").init_seeds(seed, deterministic=deterministic)


def yolo(model: str) -> Any:
    """Ultralytics' YOLO model object for a weights file or an architecture yaml."""
    return module().YOLO(model)


def strip_optimizer(path: Path, **kwargs: Any) -> dict[str, Any]:
    return module("utils.torch_utils").strip_optimizer(path, **kwargs)  # type: ignore[no-any-return]


def online() -> bool:
    return bool(module("utils").ONLINE)


def trainer_engine() -> Any:
    """ultralytics.engine.trainer: the module whose check_amp a rank replaces for a run."""
    return module("engine.trainer")


def validator_engine() -> Any:
    """ultralytics.engine.validator: the module CPU ranks correct for a validation pass."""
    return module("engine.validator")


def load_model_classes() -> None:
    """Import Ultralytics so that a checkpoint, which pickles its model classes, can be loaded."""
    module()
