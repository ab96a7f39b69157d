"""The train step's levers, switched on where `rig bench` measured them faster on this GPU with the same
losses: channels_last, CUDA graphs, fused optimizer kernels.

- channels_last (Ultralytics' `channels_last=`): the model and batches in NHWC, what Tensor Cores read
  without a transpose. Ultralytics already turns it on for CUDA when unset; rig says so, and turns it
  off where the bench measured it slower.
- CUDA graphs (Ultralytics' `compile=reduce-overhead`): the forward and backward recorded once and
  replayed as one launch, so the host's per-kernel launch cost, what bounds a small model's step,
  goes. It costs a compile (minutes, then kernels from the cache) before the first step: on only
  where the run is long enough to win that time back twice.
- fused optimizer kernels (rig's `fused_optimizer=`): torch's optimizer in one fused kernel (CUDA),
  or its multi-tensor path (CPU, where torch has no fused kernel), instead of a loop over parameters;
  fused optimizers also take GradScaler's inf check on the device, without a host sync per step.

`rig bench` measures the step eager and with each lever, on the batch `rig train` would use, and
records the measurement per GPU, torch, model, image size, batch and precision (LeverRecord, in the
cache volume). `decide` is pure: what the user gave wins; with a matching record each lever is on
where it gained at least MIN_GAIN and the first steps' losses stayed within AMP's own noise; without
one, Ultralytics' defaults, and the line says how to measure. RIG_MEASURED_LEVERS=0 ignores records.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig import flags, paths, versions
from rig.errors import RigError
from rig.yolo import ultra
from rig.yolo.nodecache import imagecache

LEVERS = ("channels_last", "cuda_graphs", "fused_optimizer")
FUSED_ENV = "RIG_FUSED_OPTIMIZER"  # read by the trainer: "1" rebuilds the optimizer with fused kernels
SWITCH = "RIG_MEASURED_LEVERS"  # 0: never follow rig bench's records
FUSED_ARG = "fused_optimizer"  # rig's own argument: Ultralytics has none, so it is taken out
GRAPHS_MODE = "reduce-overhead"  # torch.compile's mode that records CUDA graphs
MIN_GAIN = 1.03  # step img/s over eager: below it, within the step timing's run-to-run spread
PAYBACK = 2.0  # CUDA graphs: the run's saved time must be this many times the compile time
RECORD_DIR = "levers"  # under the cache volume, beside the image cache and torch.compile's
MAX_RECORD_BYTES = 1 << 16


@dataclass(frozen=True)
class Measured:
    """One lever as `rig bench` measured it against the eager step."""

    name: str
    gain: float | None  # step img/s with the lever / eager; None: not measured (note says why)
    equal: bool | None = None  # the first steps' losses within AMP's own noise of eager's
    loss_delta: float | None = None  # the largest relative loss difference from eager's
    noise: float | None = None  # the same between AMP and fp32 (the noise AMP itself brings)
    setup_s: float = 0.0  # compile time before its first step
    note: str | None = None


@dataclass(frozen=True)
class LeverKey:
    device: str  # the GPU's name as the driver gives it, or "cpu"
    torch: str
    model: str  # the model's stem (yolo11n)
    imgsz: int
    batch: int  # per GPU
    amp: bool

    def slug(self) -> str:
        precision = "amp" if self.amp else "fp32"
        text = f"{self.device}-torch{self.torch}-{self.model}-{self.imgsz}px-b{self.batch}-{precision}"
        return re.sub(r"[^a-z0-9.+-]+", "_", text.lower())


@dataclass(frozen=True)
class LeverRecord:
    key: LeverKey
    eager_img_s: float
    measured: tuple[Measured, ...]
    when: str  # UTC, ISO 8601
    steps: int = 0  # the steps each loss comparison ran


@dataclass(frozen=True)
class Choice:
    name: str
    on: bool | None  # None: left to Ultralytics (as given, or its default)
    reason: str


@dataclass(frozen=True)
class StepLevers:
    args: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    choices: tuple[Choice, ...] = ()


# ---------------------------------------------------------------------------------------------
# Decision (pure)


def verdict(m: Measured, *, eager_img_s: float, batch: int, run_steps: int | None) -> tuple[bool, str]:
    """Whether a measured lever pays, and the figures that say so."""
    if m.gain is None:
        return False, f"not measured ({m.note or 'no figure'})"
    figures = f"x{m.gain:.2f} the eager step"
    if m.equal is False:
        return False, (
            f"{figures}, but the first steps' losses moved {m.loss_delta:.2%} from eager's, beyond AMP's own "
            f"{m.noise:.2%}"
        )
    if m.gain < MIN_GAIN:
        return False, f"{figures}: under the x{MIN_GAIN} that counts as a gain"
    if m.name != "cuda_graphs" or not m.setup_s:
        return True, figures
    if run_steps is None:
        return False, f"{figures}, after {m.setup_s:.0f} s of compiling: the run's length is unknown"
    saved = run_steps * batch / eager_img_s * (1 - 1 / m.gain)
    pays = saved >= PAYBACK * m.setup_s
    return pays, (
        f"{figures}: saves ~{saved:.0f} s over the run's {run_steps} steps for {m.setup_s:.0f} s of compiling"
        + ("" if pays else f" (it pays from {PAYBACK:g}x)")
    )


def decide(
    user_args: Mapping[str, str],
    record: LeverRecord | None,
    *,
    key: LeverKey | None,
    cpu: bool,
    run_steps: int | None,
    world: int = 1,
    follow: bool = True,
    typed: Callable[[str], Any] = ultra.smart_value,
) -> StepLevers:
    """The levers for this run: Ultralytics' arguments, the trainer's environment, a reason each.

    key: what the run is (None: not one rig measures, e.g. resumed); record: the bench's measurement
    for that key, if any; follow: False with RIG_MEASURED_LEVERS=0."""
    args = {k: v for k, v in user_args.items() if k != FUSED_ARG}
    env: dict[str, str] = {}
    choices: list[Choice] = []
    given_fused = user_args.get(FUSED_ARG)
    if given_fused is not None:
        on = bool(typed(given_fused))
        env[FUSED_ENV] = "1" if on else "0"
        choices.append(Choice("fused_optimizer", on, f"{FUSED_ARG}={given_fused} as given"))
    applicable = ("fused_optimizer",) if cpu else LEVERS
    open_levers = [n for n in applicable if not (n == "fused_optimizer" and given_fused is not None)]
    for name, arg in (("channels_last", "channels_last"), ("cuda_graphs", "compile")):
        if name in open_levers and arg in args:
            open_levers.remove(name)
            choices.append(Choice(name, None, f"{arg}={args[arg]} as given"))
    if not open_levers:
        return StepLevers(args, env, tuple(choices))
    if not follow:
        why = f"{SWITCH}=0: Ultralytics' defaults"
        return StepLevers(args, env, (*choices, *(Choice(n, None, why) for n in open_levers)))
    if key is None or record is None or record.key != key:
        what = f"{key.model} at {key.imgsz} px, batch {key.batch} on {key.device}" if key else "this run"
        why = (
            f"not measured for {what} (torch {key.torch if key else '?'}): Ultralytics' defaults; "
            "`rig bench` with the same model, imgsz and batch measures them, and rig train then follows"
        )
        return StepLevers(args, env, (*choices, Choice(", ".join(open_levers), None, why)))
    measured = {m.name: m for m in record.measured}
    for name in open_levers:
        m = measured.get(name)
        if m is None:  # a record from a bench that left this lever out
            choices.append(
                Choice(name, None, f"not in rig bench's record ({record.when}): Ultralytics' default")
            )
            continue
        on, why = verdict(m, eager_img_s=record.eager_img_s, batch=key.batch, run_steps=run_steps)
        why = f"{why} (rig bench, {record.when})"
        if on and name == "cuda_graphs" and world > 1:
            # The bench measures one GPU; DDP's all-reduce runs inside the backward, between the graphs.
            on, why = False, f"{world} ranks: measured on one GPU only, where {why}"
        choices.append(Choice(name, on, why))
        if name == "channels_last":
            args["channels_last"] = str(on)
        elif name == "cuda_graphs" and on:
            args["compile"] = GRAPHS_MODE
        elif name == "fused_optimizer" and on:
            env[FUSED_ENV] = "1"
    return StepLevers(args, env, tuple(choices))


def launch_key(
    args: Mapping[str, str],
    *,
    gpu_names: Sequence[str],
    cpu: bool,
    torch: str,
    imgsz: int,
    amp: bool,
    batch: int | None,
) -> LeverKey | None:
    """The record a run would follow: its GPU (all of one name), torch, model, image size, per-GPU batch
    (rig.launch.batch's decision; None: not one the bench can have measured, AutoBatch's or a resumed
    run's) and precision; None for such a run, or on GPUs of different kinds."""
    names = set(gpu_names)
    if batch is None or not (cpu or len(names) == 1):
        return None
    return key_for(
        device="cpu" if cpu else names.pop(),
        torch=torch,
        model=args.get("model", "yolo11n.pt"),
        imgsz=imgsz,
        batch=batch,
        amp=amp and not cpu,
    )


def for_launch(
    args: Mapping[str, str],
    *,
    key: LeverKey | None,
    records: Sequence[LeverRecord],
    cpu: bool,
    world: int,
    train_images: int | None,
    default_epochs: int,
    follow: bool,
    typed: Callable[[str], Any] = ultra.smart_value,
) -> StepLevers:
    """decide() for `rig train`: the record of the run's key among those found, the run's length from
    its epochs and images."""
    check_fused_arg(args, typed)
    record = next((r for r in records if key is not None and r.key == key), None)
    steps = None
    if record is not None and key is not None:
        epochs = typed(args["epochs"]) if args.get("epochs") else default_epochs
        steps = run_steps(epochs if isinstance(epochs, int) else None, train_images, key.batch, world)
    return decide(args, record, key=key, cpu=cpu, run_steps=steps, world=world, follow=follow, typed=typed)


def fused_wanted(environ: Mapping[str, str]) -> bool:
    """The trainer's side: rebuild the optimizer with fused (or multi-tensor) kernels."""
    return environ.get(FUSED_ENV, "").strip() == "1"


def following(environ: Mapping[str, str]) -> bool:
    return flags.switched_on(environ, SWITCH)


def run_steps(epochs: int | None, images: int | None, batch: int, world: int) -> int | None:
    """The run's steps per rank: every epoch's batches of the rank's share of the images."""
    if not epochs or not images or batch < 1:
        return None
    return epochs * -(-images // (batch * max(world, 1)))


# ---------------------------------------------------------------------------------------------
# The records: one JSON file per key under the cache volume, written by `rig bench`


def record_dir(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get(imagecache.CACHE_DIR_ENV) or paths.CACHE) / RECORD_DIR


def write_record(record: LeverRecord, folder: Path) -> Path:
    """Atomically: a reader sees the old record or the new one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.key.slug()}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2) + "\n")
    os.replace(tmp, path)
    return path


MAX_RECORDS = 256  # read at a launch: a folder of more is someone else's, not a bench's


def read_records(folder: Path, torch: str) -> tuple[LeverRecord, ...]:
    """The records in folder for this torch (the launch picks its key's among them)."""
    try:
        names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))[:MAX_RECORDS]
    except OSError:
        return ()
    found = (_read(folder / name) for name in names)
    return tuple(r for r in found if r is not None and r.key.torch == torch)


def read_record(key: LeverKey, folder: Path) -> LeverRecord | None:
    """The record for key; None when there is none (see _read)."""
    record = _read(folder / f"{key.slug()}.json")
    return record if record is not None and record.key == key else None


def _read(path: Path) -> LeverRecord | None:
    """A file that is not a small regular JSON record (a FIFO, a link to one, a huge file) is none,
    never a hang."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RECORD_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = json.loads(f.read(MAX_RECORD_BYTES))
        record = LeverRecord(
            key=LeverKey(**raw["key"]),
            eager_img_s=float(raw["eager_img_s"]),
            measured=tuple(Measured(**m) for m in raw["measured"]),
            when=str(raw["when"]),
            steps=int(raw.get("steps", 0)),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    finally:
        os.close(fd)
    return record


def torch_version() -> str:
    """torch's version as installed (its package metadata, without importing it): the one spelling the
    bench and the launch both key records by."""
    return versions.installed_version("torch", versions.dist_info_versions(sys.path))


def model_stem(model: str) -> str:
    return Path(model).stem.lower()


def key_for(
    *, device: str, torch: str, model: str, imgsz: int, batch: int, amp: bool
) -> LeverKey:  # one spelling of the key for the bench and the launch
    return LeverKey(device.strip(), torch, model_stem(model), int(imgsz), int(batch), bool(amp))


def describe(choices: Sequence[Choice]) -> list[str]:
    """The INFO lines `rig train` prints: one per lever."""
    out = []
    for c in choices:
        state = {True: "on", False: "off", None: "Ultralytics' default"}[c.on]
        out.append(f"{c.name}: {state}: {c.reason}")
    return out


def check_fused_arg(user_args: Mapping[str, str], typed: Callable[[str], Any] = ultra.smart_value) -> None:
    raw = user_args.get(FUSED_ARG)
    if raw is not None and typed(raw) not in {True, False}:
        raise RigError("give True or False", option=FUSED_ARG, value=raw)
