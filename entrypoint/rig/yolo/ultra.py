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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rig import paths, safefs
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


# The dataset classes Ultralytics' build_yolo_dataset instantiates (its data.build module's names).
DATASET_CLASSES = ("YOLODataset", "YOLOMultiModalDataset")


@contextlib.contextmanager
def datasets_built_as(wrap: Callable[[Any], Any]) -> Iterator[None]:
    """While Ultralytics builds datasets (build_yolo_dataset), the classes it instantiates are
    wrap(cls) of whatever is there now: wrappers entered inside one another compose."""
    build: Any = module("data.build")
    kept = {name: getattr(build, name) for name in DATASET_CLASSES}
    for name, cls in kept.items():
        setattr(build, name, wrap(cls))
    try:
        yield
    finally:
        for name, cls in kept.items():
            setattr(build, name, cls)


@contextlib.contextmanager
def screened_files() -> Iterator[None]:
    """While Ultralytics builds datasets: an image or label file that is not a regular file is a
    corrupt image to its label scan, skipped with its own "ignoring corrupt image/label" line. Its
    readers would block on a FIFO for good, in a pool thread that a stop signal cannot end; its
    read-speed sample and its label cache (`labels.cache`) step over one too."""
    utils, dataset, base = module("data.utils"), module("data.dataset"), module("data.base")
    replaced = {
        (dataset, "verify_image_label"): _screened_label_check(utils.verify_image_label),
        (dataset, "verify_image"): _screened_image_check(utils.verify_image),
        (dataset, "load_dataset_cache_file"): _screened_cache_load(utils.load_dataset_cache_file),
        (dataset, "check_file_speeds"): _screened_speeds(utils.check_file_speeds),
        (base, "check_file_speeds"): _screened_speeds(utils.check_file_speeds),
    }
    kept = {(mod, name): getattr(mod, name) for mod, name in replaced}
    for (mod, name), value in replaced.items():
        setattr(mod, name, value)
    try:
        yield
    finally:
        for (mod, name), value in kept.items():
            setattr(mod, name, value)


def _corrupt(prefix: str, im_file: str, why: str) -> str:
    return f"{prefix}{im_file}: ignoring corrupt image/label: {why}"  # Ultralytics' own words


def _screened_label_check(check: Callable[[tuple[Any, ...]], Any]) -> Callable[[tuple[Any, ...]], Any]:
    def screened(args: tuple[Any, ...]) -> Any:
        im_file, lb_file, prefix = args[0], args[1], args[2]
        image = safefs.not_regular(im_file)
        if image is not None and image != "nothing":  # a missing image: Ultralytics' own message
            return [None] * 5 + [0, 0, 0, 1, _corrupt(prefix, im_file, f"it is {image}, not a regular file")]
        label = safefs.not_regular(lb_file)
        if label not in (None, "nothing"):  # Ultralytics would take it for a missing label: a background
            why = f"its label file {lb_file} is {label}, not a regular file"
            return [None] * 5 + [0, 0, 0, 1, _corrupt(prefix, im_file, why)]
        return check(args)

    return screened


def _screened_image_check(check: Callable[[tuple[Any, ...]], Any]) -> Callable[[tuple[Any, ...]], Any]:
    def screened(args: tuple[Any, ...]) -> Any:
        (im_file, cls), prefix = args
        what = safefs.not_regular(im_file)
        if what is not None and what != "nothing":
            return (im_file, cls), 0, 1, _corrupt(prefix, im_file, f"it is {what}, not a regular file")
        return check(args)

    return screened


def _screened_cache_load(load: Callable[[Path], Any]) -> Callable[[Path], Any]:
    def screened(path: Path) -> Any:
        if safefs.not_regular(path) is not None:  # Ultralytics scans again, and replaces it
            raise FileNotFoundError(f"{path} is not a regular file")
        return load(path)

    return screened


class _RegularOrNothing(Sequence[str]):
    """files, where one that is not a regular file reads as "" (no such file, skipped by the check).
    Checked only where indexed: the check samples a few of the files, and a Sequence of the same
    length makes `random.sample` draw exactly what it draws from the list."""

    def __init__(self, files: Sequence[Any]) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        f = self.files[i]
        return f if safefs.not_regular(f) is None else ""


def _screened_speeds(check: Callable[..., Any]) -> Callable[..., Any]:
    def screened(files: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        return check(_RegularOrNothing(files), *args, **kwargs)

    return screened


# Its classes and builders, for the modules that train or measure with them.


def default_cfg() -> dict[str, Any]:
    """Ultralytics' DEFAULT_CFG_DICT: every training argument's default."""
    return module("cfg").DEFAULT_CFG_DICT  # type: ignore[no-any-return]


def get_cfg(overrides: Mapping[str, Any]) -> Any:
    return module("cfg").get_cfg(overrides=dict(overrides))


def build_yolo_dataset(cfg: Any, img_path: str, batch: int, data: Mapping[str, Any], **kwargs: Any) -> Any:
    with screened_files():
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
