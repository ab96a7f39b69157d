"""Ultralytics' train arguments as `rig train` decides them: key=value parsing and the rules a launch
adds before any rank starts (rect/compile/sync_bn, data/model defaults, resume=, the batch over the
world (rig.launch.batch), the step's levers, the loader's workers and cache, where runs go).

Each step takes the arguments and returns new ones; what Ultralytics and the machine say (its default
batch, its runs and weights folders, its smart_value; the GPUs, the loader's room) comes in as values
(`Found`, `Facts`), so nothing here imports Ultralytics and every rule is a pure function a test calls
directly. The INFO and WARNING lines name what was decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.launch import batch, ddp, levers, steplevers
from rig.yolo import gpubatch, tuning

_logger = log.get("launch")
_TASK_SUFFIXES = {"-seg": "segment", "-pose": "pose", "-obb": "obb", "-cls": "classify"}


def parse_kv(items: Sequence[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or key.startswith("-"):
            raise RigError(f"expected an Ultralytics argument key=value, got {item!r} (e.g. epochs=10)")
        if key in args:
            raise RigError(f"argument {key} is given twice; give it once")
        args[key] = value
    return args


def resume_of(args: Mapping[str, str]) -> bool | str:
    """resume= as Ultralytics reads it: False (absent, empty, False, None), True, or a checkpoint's path."""
    text = args.get("resume", "").strip()
    if text.lower() in {"", "false", "none"}:
        return False
    return True if text.lower() == "true" else text


def guess_task(user_args: Mapping[str, str]) -> str:
    if user_args.get("task"):
        return user_args["task"]
    stem = Path(user_args.get("model", "yolo11n.pt")).stem
    return next((task for suffix, task in _TASK_SUFFIXES.items() if stem.endswith(suffix)), "detect")


def with_levers(
    user_args: Mapping[str, str], *, world: int, cpu: bool, smart_value: Callable[[str], Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """compile and sync_bn (rig.launch.levers): the arguments without rig's own, the trainer's variables;
    rect= off for training with more than one rank (rig.launch.ddp). Each WARNING said once."""
    decided = levers.decide(user_args, world=world, cpu=cpu, typed=smart_value)
    args, rect_warning = ddp.without_rect(decided.args, world, smart_value)
    for warning in (*decided.warnings, *([rect_warning] if rect_warning else [])):
        _logger.warning("%s", warning)
    return args, decided.env


def with_step_levers(
    args: dict[str, str], facts: Facts, chosen: batch.Batch, typed: Callable[[str], Any]
) -> tuple[dict[str, str], dict[str, str]]:
    """channels_last, CUDA graphs and fused optimizer kernels as rig bench measured them for this run's
    GPUs, torch, model, image size, batch and precision (rig.launch.steplevers): the arguments (without
    rig's own fused_optimizer=) and the trainer's variables, one INFO line each."""
    key = steplevers.launch_key(
        args,
        gpu_names=facts.gpu_names,
        cpu=facts.cpu,
        torch=facts.torch,
        imgsz=tuning.imgsz_of(args),
        amp=gpubatch.amp_of(args, typed),
        batch=chosen.per_rank if chosen.whole else None,
    )
    decided = steplevers.for_launch(
        args,
        key=key,
        records=facts.lever_records,
        cpu=facts.cpu,
        world=facts.world,
        train_images=facts.loader.dataset.train_images,
        default_epochs=facts.found.default_epochs,
        follow=facts.follow_records,
        typed=typed,
    )
    for line in steplevers.describe(decided.choices):
        _logger.info("%s", line)
    return decided.args, decided.env


def with_tuning(args: Mapping[str, str], decisions: Iterable[tuning.Decision]) -> dict[str, str]:
    """The loader's workers and cache (rig.yolo.tuning's decisions), where the user gave none."""
    added: dict[str, str] = {}
    for d in decisions:
        if d.key not in args:
            _logger.info("%s=%s: %s", d.key, d.value, d.reason)
            added[d.key] = d.value
    return {**args, **added}


@dataclass(frozen=True)
class Found:
    """What the rules read from the world, read once by the caller (rig.launch.trainplan.discover)."""

    demo_data: Path  # the demo dataset's data.yaml
    demo_data_exists: bool
    default_weights: Path  # yolo11n.pt in the weights folder
    default_weights_exist: bool
    default_batch: float  # Ultralytics' default batch per GPU
    default_nbs: int = 64  # its nominal batch: the images of one optimizer step
    default_epochs: int = 100


def default_data(user_args: Mapping[str, str], found: Found) -> str | None:
    """The data= a run trains on: the user's, else the demo dataset where there is one; None for a
    resume (the checkpoint has its data)."""
    if "data" in user_args or resume_of(user_args) is not False:
        return user_args.get("data")
    return str(found.demo_data) if found.demo_data_exists else None


def with_defaults(user_args: Mapping[str, str], found: Found) -> dict[str, str]:
    """data and model when the user gave none: the demo dataset, yolo11n (from scratch if offline)."""
    args = dict(user_args)
    resuming = resume_of(args) is not False
    if "data" not in args and not resuming:
        if not found.demo_data_exists:
            raise RigError(
                f"no data= given and no demo dataset at {found.demo_data}; run `make demo-data` or pass data="
            )
        args["data"] = str(found.demo_data)
    if "model" not in args and not resuming:
        args["model"] = "yolo11n.pt" if found.default_weights_exist else "yolo11n.yaml"
        if not found.default_weights_exist:
            _logger.info("no model= given and no %s: training yolo11n from scratch", found.default_weights)
    return args


def wants_newest_last(args: Mapping[str, str]) -> bool:
    """resume=True without a checkpoint: the newest last.pt of the runs folder is the one."""
    return resume_of(args) is True and not args.get("model", "").endswith(".pt")


def with_resume(args: dict[str, str], newest_last: Path | None, runs_dir: Path) -> dict[str, str]:
    """resume=True continues the newest run (newest_last: the newest last*.pt under runs_dir) unless
    model= names its last.pt."""
    if not wants_newest_last(args):
        return args
    if newest_last is None:
        raise RigError(
            f"no last.pt under {runs_dir}; give model=path/to/last.pt", option="resume", value="True"
        )
    _logger.info("resuming %s", newest_last)
    return {**args, "model": str(newest_last)}


def project(args: Mapping[str, str], *, runs_dir: Path) -> Path:
    """Where Ultralytics puts the run: project= if absolute, else under runs_dir/<task>."""
    given = Path(args["project"]) if args.get("project") else None
    if given is None or not given.is_absolute():
        base = runs_dir / guess_task(args)
        given = base / given if given else base
    return given


@dataclass(frozen=True)
class Located:
    """Where a request's run and data are, for discovery to look at (read nothing here)."""

    project: Path  # the run's folder's parent
    name: str  # its name, before Ultralytics' -2, -3
    data: str | None  # the dataset it trains on (None: a resume's, in the checkpoint)
    auto_resume: bool  # resume=auto
    newest_last_wanted: bool  # resume=True without a checkpoint
    new_folder: bool  # a new run in a folder of its own (no resume, no exist_ok=True)


def locate(user_args: Mapping[str, str], *, runs_dir: Path, default_name: str, found: Found) -> Located:
    return Located(
        project=project(user_args, runs_dir=runs_dir),
        name=user_args.get("name") or default_name,
        data=default_data(user_args, found),
        auto_resume=user_args.get("resume", "").strip().lower() == "auto",
        newest_last_wanted=wants_newest_last(user_args),
        new_folder=resume_of(user_args) is False and user_args.get("exist_ok", "").strip().lower() != "true",
    )


@dataclass(frozen=True)
class Facts:
    """Everything the rules read besides the arguments: the launch's ranks and what discovery found
    (rig.launch.trainplan), as values."""

    world: int  # the ranks of every node
    cpu: bool  # CPU (or MPS) ranks: no GPU
    device: str  # device= as the trainer gets it
    found: Found
    runs_dir: Path
    newest_last: Path | None  # resume=True without a checkpoint: the newest last*.pt under runs_dir
    loader: tuning.Node  # what the loader's workers and cache are decided from
    gpus: batch.Gpus | None  # the run's GPUs' memory, for the batch (None: the CPU)
    gpu_names: tuple[str, ...] = ()  # the run's GPUs' names: which of rig bench's records applies
    torch: str = ""  # torch's version, as rig bench's records spell it
    lever_records: tuple[steplevers.LeverRecord, ...] = ()
    follow_records: bool = True  # RIG_MEASURED_LEVERS not off


@dataclass(frozen=True)
class Decided:
    """The trainer's arguments, the variables the levers give it, whether it resumes a checkpoint
    (which knows its run directory), and whether the launcher prepares the data."""

    args: dict[str, str]
    env: dict[str, str]
    resuming: bool
    exist_ok: bool  # the user's exist_ok=True: the run folder is project/name as it is


def decide(user_args: Mapping[str, str], facts: Facts, *, smart_value: Callable[[str], Any]) -> Decided:
    """Every rule above, in order, once: the levers (and rect), the defaults, resume=True's
    checkpoint, the device, the batch (rig.launch.batch: its own check came first, on its own), the
    step's levers (rig.launch.steplevers), then the loader's workers and cache (rig.yolo.tuning)."""
    args, lever_env = with_levers(user_args, world=facts.world, cpu=facts.cpu, smart_value=smart_value)
    args = with_resume(with_defaults(args, facts.found), facts.newest_last, facts.runs_dir)
    args = {**args, "device": facts.device}
    found = facts.found
    chosen = batch.decide(
        args,
        world=facts.world,
        default=found.default_batch,
        default_nbs=found.default_nbs,
        gpus=facts.gpus,
        typed=smart_value,
    )
    args, step_env = with_step_levers(batch.applied(args, chosen), facts, chosen, smart_value)
    return Decided(
        with_tuning(args, tuning.decide_for(facts.loader, user_args=args, rank_batch=chosen.per_rank)),
        {**lever_env, **step_env},
        resume_of(args) is not False,
        args.get("exist_ok", "").strip().lower() == "true",
    )
