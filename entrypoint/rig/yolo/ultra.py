"""The one door to Ultralytics: every other part of rig reaches it here, typed by rig.yolo.contract.

What rig needs from it: its settings' directories (read from the settings.json Ultralytics reads,
without importing it), its defaults, its CLI value rule (`smart_value`), its image suffixes, its
dataset check, its modules, classes and builders, each handed out as the contract's type, so rig's
code reaches only what the contract lists (mypy checks it). A module global rig replaces while one of
Ultralytics' calls runs is replaced by `swapped`, which takes only the names the contract lists as
swapped. Ultralytics imports torch, so nothing is imported before it is asked for; on a host without
Ultralytics (the unit tests) `_optional` is the one fallback: the copies below are Ultralytics 8.4's,
and an image test checks they still equal the real ones.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import json
import os
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from rig import paths, safefs
from rig.yolo import contract, settings

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


def _module(name: str = "") -> Any:
    """ultralytics, or its submodule `name` ("data.utils"), imported now (it imports torch)."""
    return importlib.import_module(f"{PACKAGE}.{name}" if name else PACKAGE)


def _optional(name: str = "") -> Any | None:
    """As `_module`, or None on a host without Ultralytics: the one fallback."""
    try:
        return _module(name)
    except ImportError:
        return None


def installed() -> bool:
    """Whether Ultralytics can be imported here (found without importing it)."""
    return bool(package_dirs())


def package_dirs() -> list[Path]:
    """Where the installed package lies, found without importing it ([] when not installed)."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


# ---- its modules, as the contract types them ---------------------------------------------------------


def package() -> contract.Package:
    return cast(contract.Package, _module())


def cfg_module() -> contract.CfgModule:
    return cast(contract.CfgModule, _module(contract.MODULES[contract.CfgModule]))


def utils() -> contract.Utils:
    return cast(contract.Utils, _module(contract.MODULES[contract.Utils]))


def checks() -> contract.Checks:
    return cast(contract.Checks, _module(contract.MODULES[contract.Checks]))


def torch_utils() -> contract.TorchUtils:
    return cast(contract.TorchUtils, _module(contract.MODULES[contract.TorchUtils]))


def data_module() -> contract.Data:
    return cast(contract.Data, _module(contract.MODULES[contract.Data]))


def data_build() -> contract.DataBuild:
    return cast(contract.DataBuild, _module(contract.MODULES[contract.DataBuild]))


def data_dataset() -> contract.DataDataset:
    return cast(contract.DataDataset, _module(contract.MODULES[contract.DataDataset]))


def data_base() -> contract.DataBase:
    return cast(contract.DataBase, _module(contract.MODULES[contract.DataBase]))


def data_utils() -> contract.DataUtils:
    return cast(contract.DataUtils, _module(contract.MODULES[contract.DataUtils]))


def augment() -> contract.Augment:
    return cast(contract.Augment, _module(contract.MODULES[contract.Augment]))


def engine_trainer() -> contract.EngineTrainer:
    """ultralytics.engine.trainer: the module whose globals a rank replaces while its trainer runs."""
    return cast(contract.EngineTrainer, _module(contract.MODULES[contract.EngineTrainer]))


def engine_validator() -> contract.EngineValidator:
    """ultralytics.engine.validator: the module CPU ranks correct for a validation pass."""
    return cast(contract.EngineValidator, _module(contract.MODULES[contract.EngineValidator]))


def nn_tasks() -> contract.NnTasks:
    return cast(contract.NnTasks, _module(contract.MODULES[contract.NnTasks]))


def torch_parallel() -> contract.TorchParallel:
    """torch.nn.parallel (torch's, not Ultralytics'): CPU ranks replace its DistributedDataParallel."""
    return cast(
        contract.TorchParallel, importlib.import_module(contract.TORCH_MODULES[contract.TorchParallel])
    )


def task_validators() -> list[contract.TaskValidator]:
    """The task validation modules (contract.TASK_VALIDATORS) this release has, imported."""
    found = []
    for name in contract.TASK_VALIDATORS:
        mod = _optional(name.removeprefix(f"{PACKAGE}."))
        if mod is not None:
            found.append(cast(contract.TaskValidator, mod))
    return found


# ---- module globals replaced while a call runs -------------------------------------------------------

_MISSING = object()


@functools.cache
def swappable(proto: object) -> frozenset[str]:
    """The names of a module's Protocol that the contract lists as swapped."""
    hints = typing.get_type_hints(proto, include_extras=True)
    return frozenset(
        name
        for name, hint in hints.items()
        if any(isinstance(m, contract.Use) and m.kind == "swap" for m in getattr(hint, "__metadata__", ()))
    )


@contextlib.contextmanager
def swapped(proto: object, where: object, **values: Any) -> Iterator[None]:
    """`where` (a module of Ultralytics' typed by the contract's Protocol `proto`) with the globals in
    `values` replaced while inside, then put back (a name it lacked removed again). Only names the
    contract lists as swapped for `proto` are accepted: anything else is a bug, raised at once."""
    unlisted = sorted(set(values) - swappable(proto))
    if unlisted:
        raise TypeError(f"{', '.join(unlisted)}: not listed as swapped in rig.yolo.contract.{proto!r}")
    kept = {name: getattr(where, name, _MISSING) for name in values}
    for name, value in values.items():
        setattr(where, name, value)
    try:
        yield
    finally:
        for name, value in kept.items():
            if value is _MISSING:
                delattr(where, name)
            else:
                setattr(where, name, value)


def version() -> str:
    """The installed Ultralytics' version, "" without one."""
    found = _optional()
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


@functools.cache
def importable() -> bool:
    """Whether Ultralytics imports here (the host's tests have its source at most, not torch)."""
    return _optional(contract.MODULES[contract.Utils]) is not None


def default(key: str) -> Any:
    """Ultralytics' default for a training argument (its DEFAULT_CFG_DICT, the image's overlay in it)."""
    if not importable():
        return _DEFAULTS_FALLBACK[key]
    defaults: Mapping[str, Any] = utils().DEFAULT_CFG_DICT
    return defaults.get(key, _DEFAULTS_FALLBACK.get(key))


def _plain_value(text: str) -> Any:
    """smart_value for the values rig reads itself (switches, numbers), without Ultralytics."""
    low = text.strip().lower()
    if low in {"true", "false", "none"}:
        return {"true": True, "false": False, "none": None}[low]
    return int(low) if low.lstrip("-").isdigit() else text


def smart_value(text: str) -> Any:
    """A key=value argument's value typed by Ultralytics' own CLI rule ('True' -> True, '16' -> 16,
    'none' -> None)."""
    return (cfg_module().smart_value if importable() else _plain_value)(text)


@functools.cache
def image_formats() -> frozenset[str]:
    """Ultralytics' image suffixes (lower case, no dot)."""
    return frozenset(data_utils().IMG_FORMATS) if importable() else IMG_FORMATS_FALLBACK


def check_dataset(data: str, task: str = "detect") -> dict[str, Any] | None:
    """Ultralytics' dataset check (it downloads what the yaml says and fails on what is missing);
    the checked dataset, or None without Ultralytics."""
    if not importable():
        return None
    utils = data_utils()
    return utils.check_cls_dataset(data) if task == "classify" else utils.check_det_dataset(data)


@contextlib.contextmanager
def datasets_built_as(wrap: Callable[[type], type]) -> Iterator[None]:
    """While Ultralytics builds datasets (build_yolo_dataset), the classes it instantiates are
    wrap(cls) of whatever is there now: wrappers entered inside one another compose."""
    build = data_build()
    with swapped(
        contract.DataBuild,
        build,
        YOLODataset=wrap(build.YOLODataset),
        YOLOMultiModalDataset=wrap(build.YOLOMultiModalDataset),
    ):
        yield


@contextlib.contextmanager
def screened_files(on: bool | None = None) -> Iterator[None]:
    """While Ultralytics builds datasets: an image or label file that is not a regular file is a
    corrupt image to its label scan, skipped with its own "ignoring corrupt image/label" line. Its
    readers would block on a FIFO for good, in a pool thread that a stop signal cannot end; its
    read-speed sample and its label cache (`labels.cache`) step over one too. Nothing is replaced
    where the installed Ultralytics lacks what the screen replaces (`on`: that, known already)."""
    if on is None:
        from rig.yolo import ultracheck  # it imports this module

        on = ultracheck.feature_on(contract.DATA_GUARDS)
    if not on:
        yield
        return
    utils = data_utils()
    with (
        swapped(
            contract.DataDataset,
            data_dataset(),
            verify_image_label=_screened_label_check(utils.verify_image_label),
            verify_image=_screened_image_check(utils.verify_image),
            load_dataset_cache_file=_screened_cache_load(utils.load_dataset_cache_file),
            check_file_speeds=_screened_speeds(utils.check_file_speeds),
        ),
        swapped(contract.DataBase, data_base(), check_file_speeds=_screened_speeds(utils.check_file_speeds)),
    ):
        yield


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


def default_cfg() -> contract.TrainArgs:
    """Ultralytics' DEFAULT_CFG_DICT: every training argument's default."""
    return utils().DEFAULT_CFG_DICT


def get_cfg(overrides: Mapping[str, Any]) -> contract.Cfg:
    return cfg_module().get_cfg(overrides=dict(overrides))


def build_yolo_dataset(
    cfg: contract.Cfg, img_path: str, batch: int, data: Mapping[str, Any], **kwargs: Any
) -> contract.Dataset:
    with screened_files():
        return data_module().build_yolo_dataset(cfg, img_path, batch, data, **kwargs)


def build_dataloader(dataset: contract.Dataset, batch: int, workers: int, **kwargs: Any) -> contract.Loader:
    return data_module().build_dataloader(dataset, batch, workers, **kwargs)


def detection_model(cfg: str, nc: int) -> contract.DetectionModel:
    return nn_tasks().DetectionModel(cfg, nc=nc, verbose=False)


def model_ema(model: Any) -> contract.Ema:
    """Ultralytics' EMA of a model, as its trainer keeps one."""
    return torch_utils().ModelEMA(model)


def init_seeds(seed: int, deterministic: bool) -> None:
    torch_utils().init_seeds(seed, deterministic=deterministic)


def yolo(model: str) -> contract.Model:
    """Ultralytics' YOLO model object for a weights file or an architecture yaml."""
    return package().YOLO(model)


def build_optimizer(model: Any, name: str, *, lr: float, momentum: float, decay: float, nc: int) -> Any:
    """The optimizer Ultralytics' trainer builds for a model (BaseTrainer.build_optimizer: its parameter
    groups), outside a trainer: it reads its trainer's args and data only for optimizer=auto."""
    base = cast("type[contract.Trainer]", engine_trainer().BaseTrainer)
    stand_in = cast(contract.Trainer, SimpleNamespace(args=get_cfg({}), data={"nc": nc}))
    return base.build_optimizer(stand_in, model, name=name, lr=lr, momentum=momentum, decay=decay)


def online() -> bool:
    return bool(utils().ONLINE)


def load_model_classes() -> None:
    """Import Ultralytics so that a checkpoint, which pickles its model classes, can be loaded."""
    _module()
