"""What rig borrows from Ultralytics: every name, once, with the rig feature that needs it.

Ultralytics moves fast and most of what rig's speed and resume features need is not public API.
This module is the one list of it, written as types: a Protocol per Ultralytics module or object
rig reaches (its functions, classes, attributes read or set, methods called or overridden, module
globals swapped during a call) and a TypedDict per dictionary whose keys rig reads or writes
(checkpoints, training arguments, settings, labels, batches). Each member carries the features
that need it (`Annotated[..., FEATURE]` for an attribute or key, `@needs(FEATURE)` for a method).

It is checked three ways:
- `make lint`'s mypy: rig's code sees Ultralytics' objects only through these types (rig.yolo.ultra
  hands them out), so reaching an unlisted attribute or key fails the type check; a mypy plugin
  (tools/mypy_ultralytics.py) does the same for `getattr`/`hasattr` with a literal name; a unit test
  fails where rig's code takes an Ultralytics object untyped.
- rig.yolo.contractcheck reads an installed Ultralytics' source (never importing it) and says which
  names are missing or no longer accept what rig passes: a unit test runs it on the locked wheel,
  and `rig train`, `rig bench` and `rig plan` run it before any data is read.
- A feature whose names are missing turns itself off with one WARNING (FEATURES says how); what rig
  cannot train without (CORE) is one ERROR line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol, TypedDict, TypeVar

# ---- the features ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """A rig feature built on Ultralytics' names. `off`: what rig does when they are missing (the
    WARNING's second half); a required feature has none: rig cannot run without it."""

    key: str
    title: str
    off: str = ""

    @property
    def required(self) -> bool:
        return not self.off


CORE = Feature("core", "training with rig (the trainer class, its world size, the stop between batches)")
DEVICE_AUGMENT = Feature(
    "device_augment",
    "device augmentation",
    "Ultralytics' own augmentation, all of it in the loader workers",
)
NODE_CACHE = Feature(
    "node_cache",
    "node image cache",
    "cache=ram is Ultralytics' own, a copy per rank",
)
EXACT_RESUME = Feature(
    "exact_resume",
    "exact resume and periodic checkpoints",
    "checkpoints are Ultralytics' own: a stop keeps the last epoch's end, a resume reruns the epoch",
)
CPU_RANKS = Feature(
    "cpu_ranks",
    "CPU ranks",
    "device=cpu trains in one process; --cpu-ranks above 1 is refused",
)
LEVERS = Feature(
    "levers",
    "step levers",
    "sync_bn and the fused optimizer stay off",
)
METRICS = Feature(
    "metrics",
    "metrics and telemetry",
    "no Prometheus metrics or step timing for the run (GPU telemetry stays)",
)
BENCH = Feature("bench", "rig bench", "rig bench refuses to run")
SETTINGS = Feature(
    "settings",
    "settings and folders",
    "Ultralytics' own settings and folders, not the image's volumes",
)
OFFLINE = Feature(
    "offline",
    "offline guards",
    "Ultralytics' own AMP check, which tries to download yolo26n.pt where it is missing",
)
DATA_GUARDS = Feature(
    "data_guards",
    "data guards",
    "a FIFO or device among the images or labels can hang the label scan",
)
EXPORT = Feature("export", "rig export's check", "rig export refuses to run")

FEATURES = (
    CORE,
    DEVICE_AUGMENT,
    NODE_CACHE,
    EXACT_RESUME,
    CPU_RANKS,
    LEVERS,
    METRICS,
    BENCH,
    SETTINGS,
    OFFLINE,
    DATA_GUARDS,
    EXPORT,
)


# ---- how a name is used (besides being read or called) --------------------------------------------


@dataclass(frozen=True)
class Use:
    """How rig uses a name, beyond reading or calling it: `swap` (a module global replaced while a
        call runs; `within`: the function of the module that must read it for the swap to work),
        `override` (a method rig's subclass replaces: its parameters must stay what rig's takes), `calls`
        (a method whose body must make this call, which rig intercepts: `self.last.write_bytes`),
        `optional` (checked where present: a module some releases lack), `sets` (an attribute rig sets
    for Ultralytics' code to read)."""

    kind: str
    within: str = ""


SWAP = Use("swap")
OVERRIDE = Use("override")
OPTIONAL = Use("optional")
SETS = Use("sets")  # an attribute rig sets for Ultralytics' code to read: no class of it need have it


def swap_within(function: str) -> Use:
    return Use("swap", function)


def calls(call: str) -> Use:
    return Use("calls", call)


_F = TypeVar("_F", bound=Callable[..., Any])


def needs(*tags: Feature | Use) -> Callable[[_F], _F]:
    """The features (and uses) of a method or module function listed in a Protocol."""

    def mark(fn: _F) -> _F:
        fn.__rig_needs__ = tags  # type: ignore[attr-defined]
        return fn

    return mark


# ---- Ultralytics' objects ----------------------------------------------------------------------------


class Cfg(Protocol):
    """A run's arguments (IterableSimpleNamespace of cfg/default.yaml's keys), as rig reads them."""

    model: Annotated[Any, CORE]
    data: Annotated[Any, CORE]
    task: Annotated[str, CORE]
    device: Annotated[Any, CORE]
    seed: Annotated[int, EXACT_RESUME]
    deterministic: Annotated[bool, BENCH]
    workers: Annotated[int, CPU_RANKS]
    cache: Annotated[Any, NODE_CACHE]
    imgsz: Annotated[Any, NODE_CACHE]
    batch: Annotated[Any, NODE_CACHE]
    compile: Annotated[Any, LEVERS]
    plots: Annotated[bool, CPU_RANKS]


class TrainArgs(TypedDict, total=False):
    """Training arguments by key (DEFAULT_CFG_DICT, a checkpoint's train_args, `key=value`)."""

    model: Annotated[str, CORE]
    data: Annotated[str, CORE]
    task: Annotated[str, CORE]
    mode: Annotated[str, CORE]
    device: Annotated[str, CORE]
    epochs: Annotated[int, CORE]
    batch: Annotated[float, CORE]
    imgsz: Annotated[Any, CORE]
    nbs: Annotated[int, CORE]
    workers: Annotated[int, CORE]
    cache: Annotated[Any, CORE]
    resume: Annotated[Any, CORE]
    name: Annotated[str, CORE]
    project: Annotated[str, CORE]
    exist_ok: Annotated[bool, CORE]
    seed: Annotated[int, CORE]
    deterministic: Annotated[bool, CORE]
    rect: Annotated[bool, CORE]
    amp: Annotated[Any, CORE]
    compile: Annotated[Any, LEVERS]
    close_mosaic: Annotated[int, EXACT_RESUME]
    val: Annotated[bool, BENCH]
    plots: Annotated[bool, BENCH]
    save: Annotated[bool, BENCH]
    verbose: Annotated[bool, BENCH]
    optimizer: Annotated[str, BENCH]
    lr0: Annotated[float, BENCH]
    momentum: Annotated[float, BENCH]
    weight_decay: Annotated[float, BENCH]


class Checkpoint(TypedDict, total=False):
    """A training checkpoint (BaseTrainer.save_model's dictionary) as rig reads it."""

    epoch: Annotated[int, EXACT_RESUME]
    train_args: Annotated[TrainArgs, EXACT_RESUME]
    optimizer: Annotated[Any, EXACT_RESUME]
    ema: Annotated[Any, EXACT_RESUME]
    updates: Annotated[int, EXACT_RESUME]
    version: Annotated[str, EXACT_RESUME]


class SettingsKeys(TypedDict, total=False):
    """Ultralytics' settings (SettingsManager's defaults) the image sets or reads."""

    datasets_dir: Annotated[str, SETTINGS]
    weights_dir: Annotated[str, SETTINGS]
    runs_dir: Annotated[str, SETTINGS]
    sync: Annotated[bool, SETTINGS]
    uuid: Annotated[str, SETTINGS]
    clearml: Annotated[bool, SETTINGS]
    comet: Annotated[bool, SETTINGS]
    dvc: Annotated[bool, SETTINGS]
    mlflow: Annotated[bool, SETTINGS]
    raytune: Annotated[bool, SETTINGS]
    tensorboard: Annotated[bool, SETTINGS]
    vscode_msg: Annotated[bool, SETTINGS]
    openvino_msg: Annotated[bool, SETTINGS]


class Labels(TypedDict, total=False):
    """One sample's labels as the dataset's transforms pass them on."""

    img: Annotated[Any, DEVICE_AUGMENT]
    resized_shape: Annotated[Any, DEVICE_AUGMENT]
    shape: Annotated[Any, NODE_CACHE]
    im_file: Annotated[str, DEVICE_AUGMENT]


class Batch(TypedDict, total=False):
    """A collated batch (the dataset's collate_fn)."""

    img: Annotated[Any, DEVICE_AUGMENT]
    im_file: Annotated[Sequence[str], DEVICE_AUGMENT]


class MosaicTile(TypedDict):
    """One image's place in Mosaic's canvas (its get_params' layout)."""

    labels_patch: Annotated[Labels, DEVICE_AUGMENT]
    x1a: Annotated[int, DEVICE_AUGMENT]
    y1a: Annotated[int, DEVICE_AUGMENT]
    x1b: Annotated[int, DEVICE_AUGMENT]
    y1b: Annotated[int, DEVICE_AUGMENT]
    x2b: Annotated[int, DEVICE_AUGMENT]
    y2b: Annotated[int, DEVICE_AUGMENT]


class MosaicParams(TypedDict):
    layout: Annotated[list[MosaicTile], DEVICE_AUGMENT]


class PerspectiveParams(TypedDict):
    M: Annotated[Any, DEVICE_AUGMENT]
    size: Annotated[Any, DEVICE_AUGMENT]


class FlipParams(TypedDict):
    flip: Annotated[bool, DEVICE_AUGMENT]
    direction: Annotated[str, DEVICE_AUGMENT]


class Transform(Protocol):
    """BaseTransform: a training transform, drawing its parameters then applying them."""

    @needs(DEVICE_AUGMENT, OVERRIDE)
    def apply_image(self, labels: Labels, params: Any = ...) -> Labels: ...


class Compose(Protocol):
    transforms: Annotated[list[Any], DEVICE_AUGMENT]


class Mosaic(Transform, Protocol):
    n: Annotated[int, DEVICE_AUGMENT]
    imgsz: Annotated[int, DEVICE_AUGMENT]


class RandomPerspective(Transform, Protocol):
    perspective: Annotated[float, DEVICE_AUGMENT]


class RandomFlip(Transform, Protocol):
    pass


class RandomHSV(Transform, Protocol):
    hgain: Annotated[float, DEVICE_AUGMENT]
    sgain: Annotated[float, DEVICE_AUGMENT]
    vgain: Annotated[float, DEVICE_AUGMENT]


class Format(Transform, Protocol):
    bgr: Annotated[float, DEVICE_AUGMENT]


class Mixing(Protocol):
    """MixUp, CutMix and CopyPaste: their probability."""

    p: Annotated[float, DEVICE_AUGMENT]


class Albumentations(Protocol):
    transform: Annotated[Any, DEVICE_AUGMENT]


class LetterBox(Protocol):
    @needs(EXPORT)
    def __call__(self, labels: Any = ..., image: Any = ...) -> Any: ...


class Dataset(Protocol):
    """BaseDataset / YOLODataset as rig reads and extends it."""

    im_files: Annotated[list[str], NODE_CACHE]
    ni: Annotated[int, NODE_CACHE]
    labels: Annotated[list[Labels], NODE_CACHE]
    imgsz: Annotated[Any, NODE_CACHE]
    channels: Annotated[int, NODE_CACHE]
    cv2_flag: Annotated[int, NODE_CACHE]
    cache: Annotated[Any, NODE_CACHE]
    ims: Annotated[Any, NODE_CACHE]
    im_hw0: Annotated[Any, NODE_CACHE]
    im_hw: Annotated[Any, NODE_CACHE]
    augment: Annotated[bool, DEVICE_AUGMENT]

    def __len__(self) -> int: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def __getitem__(self, index: int) -> Labels: ...
    @needs(NODE_CACHE)
    def load_image(self, i: int, rect_mode: bool = ...) -> tuple[Any, Any, Any]: ...
    @needs(NODE_CACHE, OVERRIDE)
    def cache_images(self) -> None: ...
    @needs(NODE_CACHE, OVERRIDE)
    def check_cache_ram(self, safety_margin: float = ...) -> bool: ...
    @needs(DEVICE_AUGMENT, OVERRIDE)
    def build_transforms(self, hyp: Any = ...) -> Any: ...
    @staticmethod
    @needs(DEVICE_AUGMENT, OVERRIDE)
    def collate_fn(batch: list[dict[str, Any]]) -> dict[str, Any]: ...


class TorchModule(Protocol):
    """torch.nn.Module, as rig uses Ultralytics' models beyond their own members (torch's: not checked)."""

    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> Any: ...
    def to(self, *args: Any, **kwargs: Any) -> Any: ...
    def train(self, mode: bool = ...) -> Any: ...
    def eval(self) -> Any: ...
    def float(self) -> Any: ...
    def parameters(self) -> Iterator[Any]: ...
    def named_parameters(self) -> Iterator[tuple[str, Any]]: ...


class TorchLoader(Protocol):
    """torch.utils.data.DataLoader's own attributes (torch's: not checked)."""

    dataset: Any
    sampler: Any
    batch_size: int
    num_workers: int
    worker_init_fn: Any

    def __len__(self) -> int: ...


class Sampler(Protocol):
    """The loader's batch sampler (_RepeatSampler over torch's BatchSampler)."""

    sampler: Annotated[Any, EXACT_RESUME]


class Loader(TorchLoader, Protocol):
    """InfiniteDataLoader: one persistent iterator, reset when mosaic closes."""

    batch_sampler: Annotated[Sampler, EXACT_RESUME]
    iterator: Annotated[Any, EXACT_RESUME]

    @needs(CORE)
    def __iter__(self) -> Iterator[Batch]: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def reset(self) -> None: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def close(self) -> None: ...


class Callbacks(Protocol):
    """What carries Ultralytics' callbacks: models, trainers, validators."""

    callbacks: Annotated[dict[str, list[Callable[[Any], None]]], CORE]

    @needs(CORE)
    def add_callback(self, event: str, callback: Callable[[Any], None], /) -> None: ...


class Validator(Callbacks, Protocol):
    dataloader: Annotated[Loader, CORE]
    batch_i: Annotated[int, CORE]


class Stopper(Protocol):
    """EarlyStopping."""

    best_fitness: Annotated[Any, EXACT_RESUME]
    best_epoch: Annotated[int, EXACT_RESUME]

    def __call__(self, epoch: int, fitness: Any) -> bool: ...


class Ema(Protocol):
    """ModelEMA."""

    ema: Annotated[Any, EXACT_RESUME]
    updates: Annotated[int, EXACT_RESUME]

    @needs(BENCH)
    def update(self, model: Any) -> None: ...


class Trainer(Callbacks, Protocol):
    """The task's trainer (DetectionTrainer over BaseTrainer) as rig's subclass sees it."""

    args: Annotated[Cfg, CORE]
    device: Annotated[Any, CORE]
    accelerator: Annotated[Any, CORE, SETS]
    world_size: Annotated[int, CORE]
    epoch: Annotated[int, CORE]
    epochs: Annotated[int, CORE]
    start_epoch: Annotated[int, CORE]
    stop: Annotated[bool, CORE]
    model: Annotated[Any, CORE]
    validator: Annotated[Validator, CORE]
    train_loader: Annotated[Loader, CORE]
    test_loader: Annotated[Loader, CORE]
    last: Annotated[Path, CORE]
    best: Annotated[Path, CORE]
    wdir: Annotated[Path, EXACT_RESUME]
    save_dir: Annotated[Path, METRICS]
    resume: Annotated[Any, EXACT_RESUME]
    metrics: Annotated[dict[str, Any] | None, EXACT_RESUME]
    fitness: Annotated[Any, EXACT_RESUME]
    best_fitness: Annotated[Any, EXACT_RESUME]
    tloss: Annotated[Any, EXACT_RESUME]
    loss: Annotated[Any, EXACT_RESUME]
    loss_items: Annotated[Any, EXACT_RESUME]
    loss_names: Annotated[tuple[str, ...], EXACT_RESUME]
    stopper: Annotated[Stopper, EXACT_RESUME]
    optimizer: Annotated[Any, EXACT_RESUME]
    scaler: Annotated[Any, EXACT_RESUME]
    ema: Annotated[Ema, EXACT_RESUME]
    # rig's property replaces it: Ultralytics sets it, rig adds a resumed run's offset
    accumulate: Annotated[int, EXACT_RESUME, OVERRIDE]
    freeze_layer_names: Annotated[list[str], LEVERS]

    @needs(CORE, OVERRIDE)
    def __init__(self, cfg: Any = ..., overrides: Any = ..., _callbacks: Any = ...) -> None: ...
    @needs(CORE, OVERRIDE)
    def check_resume(self, overrides: Any) -> None: ...
    @needs(CORE, OVERRIDE)
    def _setup_ddp(self) -> None: ...
    # CPU ranks replace torch's DistributedDataParallel while it runs (rig.launch.cpuddp)
    @needs(CORE, OVERRIDE, calls("nn.parallel.DistributedDataParallel"))
    def _setup_train(self) -> Any: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def _do_train(self) -> Any: ...
    @needs(CORE, OVERRIDE)
    def build_dataset(self, img_path: str, mode: str = ..., batch: int | None = ...) -> Any: ...
    @needs(CORE, OVERRIDE)
    def get_dataloader(
        self, dataset_path: str, batch_size: int = ..., rank: int = ..., mode: str = ...
    ) -> Any: ...
    @needs(DEVICE_AUGMENT, OVERRIDE)
    def preprocess_batch(self, batch: dict[str, Any]) -> Any: ...
    @needs(LEVERS, OVERRIDE)
    def set_model_attributes(self) -> None: ...
    @needs(LEVERS, OVERRIDE)
    def build_optimizer(
        self,
        model: Any,
        name: str = ...,
        lr: float = ...,
        momentum: float = ...,
        decay: float = ...,
        iterations: float = ...,
    ) -> Any: ...
    @needs(LEVERS, OVERRIDE)
    def _model_train(self) -> None: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def _load_checkpoint_state(self, ckpt: Checkpoint) -> None: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def optimizer_step(self) -> None: ...
    @needs(CORE, OVERRIDE)
    def validate(self) -> Any: ...
    @needs(CORE, OVERRIDE)
    def final_eval(self) -> Any: ...
    @needs(CORE, OVERRIDE)
    def save_metrics(self, metrics: dict[str, Any]) -> None: ...
    @needs(EXACT_RESUME, OVERRIDE, calls("self.last.write_bytes"))
    def save_model(self) -> Any: ...
    @needs(EXACT_RESUME, OVERRIDE)
    def resume_training(self, ckpt: Checkpoint | None) -> None: ...
    @needs(EXACT_RESUME)
    def label_loss_items(self, loss_items: Any = ..., prefix: str = ...) -> Any: ...


class Model(Callbacks, Protocol):
    """YOLO (engine.model.Model): what rig trains, exports and resumes with."""

    task: Annotated[str, CORE]
    task_map: Annotated[dict[str, dict[str, Any]], CORE]
    ckpt: Annotated[Checkpoint | None, CORE]
    ckpt_path: Annotated[str | None, CORE]
    trainer: Annotated[Any, CORE]
    model: Annotated[DetectionModel, EXPORT]

    @needs(CORE)
    def train(self, trainer: Any = ..., **kwargs: Any) -> Any: ...
    @needs(EXPORT)
    def export(self, **kwargs: Any) -> Any: ...


class DetectionModel(TorchModule, Protocol):
    """nn.tasks.DetectionModel (a torch module) as rig uses it beyond torch's Module."""

    args: Annotated[Any, BENCH, SETS]
    criterion: Annotated[Any, EXACT_RESUME]
    stride: Annotated[Any, EXPORT]

    @needs(EXACT_RESUME)
    def init_criterion(self) -> Any: ...
    @needs(BENCH)
    def loss(self, batch: Any, preds: Any = ...) -> Any: ...


# ---- Ultralytics' modules ----------------------------------------------------------------------------


class Package(Protocol):
    """ultralytics"""

    __version__: Annotated[str, CORE]

    @needs(CORE)
    def YOLO(self, model: Any = ..., task: Any = ..., verbose: bool = ...) -> Model: ...


class CfgModule(Protocol):
    """ultralytics.cfg"""

    @needs(CORE)
    def get_cfg(self, cfg: Any = ..., overrides: Any = ...) -> Cfg: ...
    @needs(CORE)
    def smart_value(self, v: str) -> Any: ...


class Utils(Protocol):
    """ultralytics.utils"""

    DEFAULT_CFG_DICT: Annotated[TrainArgs, CORE]
    ONLINE: Annotated[bool, OFFLINE]
    ASSETS: Annotated[Path, EXPORT]


class Checks(Protocol):
    """ultralytics.utils.checks"""

    @needs(NODE_CACHE)
    def check_imgsz(
        self, imgsz: Any, stride: int = ..., min_dim: int = ..., max_dim: int = ..., floor: int = ...
    ) -> Any: ...


class TorchUtils(Protocol):
    """ultralytics.utils.torch_utils"""

    @needs(EXACT_RESUME)
    def unwrap_model(self, m: Any) -> Any: ...
    @needs(BENCH)
    def ModelEMA(self, model: Any) -> Ema: ...
    @needs(BENCH)
    def init_seeds(self, seed: int = ..., deterministic: bool = ...) -> None: ...
    @needs(CORE)
    def strip_optimizer(self, f: Any = ..., s: str = ..., updates: Any = ...) -> dict[str, Any]: ...
    @needs(BENCH)
    def autocast(self, enabled: Any, /, device: str = ...) -> Any: ...


class Data(Protocol):
    """ultralytics.data"""

    @needs(NODE_CACHE)
    def build_yolo_dataset(
        self,
        cfg: Cfg,
        img_path: str,
        batch: int,
        data: Mapping[str, Any],
        mode: str = ...,
        rect: bool = ...,
        stride: int = ...,
    ) -> Dataset: ...
    @needs(BENCH)
    def build_dataloader(
        self, dataset: Dataset, batch: int, workers: int, shuffle: bool = ..., rank: int = ...
    ) -> Loader: ...


class DataBuild(Protocol):
    """ultralytics.data.build"""

    InfiniteDataLoader: Annotated[type, EXACT_RESUME, swap_within("build_dataloader")]
    YOLODataset: Annotated[type, NODE_CACHE, swap_within("build_yolo_dataset")]
    YOLOMultiModalDataset: Annotated[type, NODE_CACHE, swap_within("build_yolo_dataset")]


class DataDataset(Protocol):
    """ultralytics.data.dataset"""

    YOLODataset: Annotated[type, NODE_CACHE]
    verify_image_label: Annotated[Callable[..., Any], DATA_GUARDS, SWAP]
    verify_image: Annotated[Callable[..., Any], DATA_GUARDS, SWAP]
    load_dataset_cache_file: Annotated[Callable[..., Any], DATA_GUARDS, SWAP]
    check_file_speeds: Annotated[Callable[..., Any], DATA_GUARDS, SWAP]


class DataBase(Protocol):
    """ultralytics.data.base"""

    BaseDataset: Annotated[type, NODE_CACHE]
    check_file_speeds: Annotated[Callable[..., Any], DATA_GUARDS, SWAP]


class DataUtils(Protocol):
    """ultralytics.data.utils"""

    IMG_FORMATS: Annotated[frozenset[str], CORE]

    @needs(CORE)
    def check_det_dataset(self, dataset: str, autodownload: bool = ...) -> dict[str, Any]: ...
    @needs(CORE)
    def check_cls_dataset(self, dataset: str) -> dict[str, Any]: ...
    @needs(DATA_GUARDS)
    def verify_image_label(self, args: Any) -> Any: ...
    @needs(DATA_GUARDS)
    def verify_image(self, args: Any) -> Any: ...
    @needs(DATA_GUARDS)
    def load_dataset_cache_file(self, path: Path) -> Any: ...
    @needs(DATA_GUARDS)
    def check_file_speeds(self, files: Any) -> Any: ...


class Augment(Protocol):
    """ultralytics.data.augment"""

    Compose: Annotated[type, DEVICE_AUGMENT]
    Mosaic: Annotated[type, DEVICE_AUGMENT]
    RandomPerspective: Annotated[type, DEVICE_AUGMENT]
    RandomFlip: Annotated[type, DEVICE_AUGMENT]
    RandomHSV: Annotated[type, DEVICE_AUGMENT]
    Format: Annotated[type, DEVICE_AUGMENT]
    MixUp: Annotated[type, DEVICE_AUGMENT]
    CutMix: Annotated[type, DEVICE_AUGMENT]
    CopyPaste: Annotated[type, DEVICE_AUGMENT]
    Albumentations: Annotated[type, DEVICE_AUGMENT]

    @needs(EXPORT)
    def LetterBox(self, new_shape: Any = ..., auto: bool = ..., stride: int = ...) -> LetterBox: ...


class EngineTrainer(Protocol):
    """ultralytics.engine.trainer"""

    BaseTrainer: Annotated[type, BENCH]

    check_amp: Annotated[Callable[[Any], bool], OFFLINE, swap_within("BaseTrainer._setup_train")]
    enumerate: Annotated[Callable[..., Any], EXACT_RESUME, swap_within("BaseTrainer._do_train")]
    strip_optimizer: Annotated[Callable[..., Any], CORE, swap_within("BaseTrainer.final_eval")]


class EngineValidator(Protocol):
    """ultralytics.engine.validator"""

    dist: Annotated[Any, CPU_RANKS, SWAP]
    AutoBackend: Annotated[Callable[..., Any], CPU_RANKS, swap_within("BaseValidator.__call__")]
    get_torch_device_backend: Annotated[
        Callable[[Any], Any], CPU_RANKS, swap_within("BaseValidator.__call__")
    ]


class TaskValidator(Protocol):
    """A task's validation module (models.yolo.TASK.val) that gathers over torch.distributed."""

    dist: Annotated[Any, CPU_RANKS, SWAP, OPTIONAL]


class TorchParallel(Protocol):
    """torch.nn.parallel, whose DistributedDataParallel Ultralytics' _setup_train wraps the model in."""

    DistributedDataParallel: Annotated[type, CPU_RANKS, SWAP]


class NnTasks(Protocol):
    """ultralytics.nn.tasks"""

    @needs(BENCH)
    def DetectionModel(self, cfg: str = ..., nc: int | None = ..., verbose: bool = ...) -> DetectionModel: ...


# ---- where each lies in the package ----------------------------------------------------------------

# Protocols of torch's own members: the contract check does not look for them in Ultralytics.
TORCH: frozenset[type] = frozenset({TorchModule, TorchLoader})

# Protocol -> "module" or "module:Class": the source the contract check reads. A class is looked up
# with its bases; a TypedDict's keys are looked up as string constants where they are made.
MODULES: dict[type, str] = {
    Package: "",
    CfgModule: "cfg",
    Utils: "utils",
    Checks: "utils.checks",
    TorchUtils: "utils.torch_utils",
    Data: "data",
    DataBuild: "data.build",
    DataDataset: "data.dataset",
    DataBase: "data.base",
    DataUtils: "data.utils",
    Augment: "data.augment",
    EngineTrainer: "engine.trainer",
    EngineValidator: "engine.validator",
    NnTasks: "nn.tasks",
}
# torch's modules rig swaps a name in (torch is the image's pin: not checked against Ultralytics).
TORCH_MODULES: dict[type, str] = {TorchParallel: "torch.nn.parallel"}
# The task validators whose `dist` CPU ranks correct (any of them may be missing in a release).
TASK_VALIDATORS = (
    "models.yolo.detect.val",
    "models.yolo.classify.val",
    "models.yolo.depth.val",
    "models.yolo.semantic.val",
)
CLASSES: dict[type, str] = {
    Trainer: "models.yolo.detect.train:DetectionTrainer",
    Validator: "models.yolo.detect.val:DetectionValidator",
    Model: "models.yolo.model:YOLO",
    DetectionModel: "nn.tasks:DetectionModel",
    Dataset: "data.dataset:YOLODataset",
    Loader: "data.build:InfiniteDataLoader",
    Sampler: "data.build:_RepeatSampler",
    Stopper: "utils.torch_utils:EarlyStopping",
    Ema: "utils.torch_utils:ModelEMA",
    Transform: "data.augment:BaseTransform",
    Compose: "data.augment:Compose",
    Mosaic: "data.augment:Mosaic",
    RandomPerspective: "data.augment:RandomPerspective",
    RandomFlip: "data.augment:RandomFlip",
    RandomHSV: "data.augment:RandomHSV",
    Format: "data.augment:Format",
    Mixing: "data.augment:MixUp",
    Albumentations: "data.augment:Albumentations",
    LetterBox: "data.augment:LetterBox",
}
# TypedDict -> where its keys are made: "cfg" (cfg/default.yaml), or "module:Class.method" /
# "module:function" whose source holds each key as a string constant.
KEYS: dict[type, str] = {
    Cfg: "cfg",
    TrainArgs: "cfg",
    Checkpoint: "engine.trainer:BaseTrainer.save_model",
    SettingsKeys: "utils:SettingsManager.__init__",
    Labels: "data.dataset:YOLODataset",
    Batch: "data.dataset:YOLODataset",
    MosaicTile: "data.augment:Mosaic.get_params",
    MosaicParams: "data.augment:Mosaic.get_params",
    PerspectiveParams: "data.augment:RandomPerspective.get_params",
    FlipParams: "data.augment:RandomFlip.get_params",
}
# The callback events rig registers (utils/callbacks/base.py's default_callbacks).
EVENTS: dict[str, tuple[Feature, ...]] = {
    "on_pretrain_routine_end": (LEVERS,),
    "on_train_start": (CORE, METRICS),
    "on_train_epoch_start": (CORE, METRICS),
    "on_train_batch_start": (CORE, METRICS),
    "on_train_batch_end": (CORE, METRICS),
    "on_fit_epoch_end": (METRICS,),
    "on_model_save": (METRICS,),
    "on_train_end": (METRICS,),
    "teardown": (METRICS,),
    "on_val_start": (CORE,),
    "on_val_batch_end": (CORE,),
}
EVENTS_AT = "utils.callbacks.base:default_callbacks"


# ---- the versions tested ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The Ultralytics releases rig is tested with: `newest` is the image's pin (pyproject.toml),
    `oldest` is trained, stopped and resumed by `make test-ultralytics` in CI."""

    oldest: str

    def describe(self, newest: str) -> str:
        return f"{self.oldest} to {newest}"


WINDOW = Window(oldest="8.4.120")
