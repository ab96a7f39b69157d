"""Where the image writes at run time, and the user's own places where those are read-only.

At run time the image writes Ultralytics' settings (YOLO_CONFIG_DIR, /workspace/.config), the runs
(the settings' runs_dir, /workspace/runs), torch.compile's caches (TORCHINDUCTOR_CACHE_DIR,
TRITON_CACHE_DIR) and the node image cache with `rig bench`'s records (RIG_CACHE_DIR, /cache): all
in the volumes compose mounts there. Where one of them lies on a read-only file system (Apptainer's
SIF, an enroot or `docker run --read-only` root with nothing mounted at that folder), it moves:
- the settings to a folder of the user's own, `<tmp>/yolo-rig-<uid>/config`, seeded from the image's
  defaults (rig.yolo.settings.fallback), where `yolo settings` changes stick;
- the runs to `./runs` of the folder the command starts in, as stock Ultralytics keeps them (the
  settings' runs_dir is then `runs`), unless a writable folder is mounted at /workspace/runs;
- the caches to `<tmp>/yolo-rig-<uid>/cache`, with what libraries would cache in the home by
  themselves (XDG_CACHE_HOME: onnxruntime's device id; MPLCONFIGDIR: matplotlib's font list);
`<tmp>` is the job's own temporary folder where the scheduler gives one (SLURM_TMPDIR, TMPDIR), else
/tmp; `yolo-rig-<uid>` is made private (0700) and used only when it is this user's alone, never a
link. Never $HOME: under Apptainer it is the host's home, and nothing of the image lands there unasked.
One INFO line says what moved and how to keep it elsewhere. A folder on a writable file system that
this uid cannot write (`docker run --user`) is left as it is: rig's own checks name it (`rig doctor`,
the node cache's WARNING).

`rig exec` (the ENTRYPOINT: `apptainer run` of any command) prepares the command's environment;
rig's own commands that write (`apptainer exec IMAGE rig train`) prepare their own process
(`prepare_process`), the host's breaking variables dropped first (rig.hostenv).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import rig
from rig import hostenv, log, paths, safefs
from rig.yolo import settings, ultra
from rig.yolo.nodecache.imagecache import CACHE_DIR_ENV

# Each cache variable and its folder under the fallback cache; RIG_CACHE_DIR's default is the image's.
CACHES = {CACHE_DIR_ENV: "", "TORCHINDUCTOR_CACHE_DIR": "torch/inductor", "TRITON_CACHE_DIR": "torch/triton"}
# What libraries would otherwise write in the home by themselves, and their folder under the fallback cache.
HOME_CACHES = {"XDG_CACHE_HOME": "xdg", "MPLCONFIGDIR": "matplotlib"}
TMP_ENVS = ("SLURM_TMPDIR", "TMPDIR")  # the job's own temporary folder, where a scheduler sets one
RELATIVE_RUNS = "runs"  # the settings' runs_dir: ./runs of the folder Ultralytics runs in

_logger = log.get("places")


def read_only(path: Path) -> bool:
    """Whether path, or the nearest folder above it that exists, is on a read-only file system."""
    for folder in (path, *path.parents):
        try:
            return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return False


def tmp_root(environ: Mapping[str, str]) -> Path:
    """`<tmp>`: the job's own temporary folder (SLURM_TMPDIR, TMPDIR), else /tmp."""
    return Path(next((environ[n] for n in TMP_ENVS if environ.get(n, "").startswith("/")), "/tmp"))


def private_base(environ: Mapping[str, str], uid: int) -> Path:
    """The user's own folder for what moves: `<tmp>/yolo-rig-<uid>`."""
    return tmp_root(environ) / f"yolo-rig-{uid}"


@dataclass(frozen=True)
class Moves:
    """What moves where (pure decision)."""

    env: dict[str, str] = field(default_factory=dict)  # the variables that change
    config_dir: Path | None = None  # the settings' new folder (YOLO_CONFIG_DIR), to seed
    runs_dir: str = ""  # the runs_dir its settings.json holds
    moved: list[str] = field(default_factory=list)  # what moved where, for the line


def decide(environ: Mapping[str, str], base: Path, is_read_only: Callable[[Path], bool] = read_only) -> Moves:
    """The places this environment writes that are read-only, and where each goes instead."""
    env: dict[str, str] = {}
    moved: list[str] = []
    config_dir = None
    runs_dir = ""
    if is_read_only(settings.settings_file(environ).parent):
        config_dir = base / "config"
        env[settings.VARIABLE] = str(config_dir)
        moved.append(f"Ultralytics' settings in {config_dir}")
        runs = ultra.settings_dirs(environ)["runs_dir"]
        runs_dir = str(runs)
        if is_read_only(runs):
            runs_dir = RELATIVE_RUNS
            now = Path(RELATIVE_RUNS).absolute()
            moved.append(f"runs in ./{RELATIVE_RUNS} of the folder you start in ({now} now)")
    caches = []
    for name, sub in CACHES.items():
        value = environ.get(name) or (str(paths.CACHE) if name == CACHE_DIR_ENV else "")
        if value and is_read_only(Path(value)):
            env[name] = str(base / "cache" / sub) if sub else str(base / "cache")
            caches.append(name)
    if env:
        # Where the image is read-only the home is the host's (Apptainer, Pyxis): what the libraries
        # cache there by themselves (matplotlib's font list, onnxruntime's device id) goes too.
        for name, sub in HOME_CACHES.items():
            if not environ.get(name):
                env[name] = str(base / "cache" / sub)
                caches.append(name)
    if caches:
        moved.append(f"caches in {base / 'cache'}")
    return Moves(env, config_dir, runs_dir, moved)


def line(moves: Moves, base: Path) -> str:
    return (
        f"the image's folders are read-only here: {'; '.join(moves.moved)}. To keep them elsewhere, "
        "bind writable folders at /workspace/runs and /cache, or set YOLO_CONFIG_DIR "
        f"(docs/training.md, Apptainer); {base} is yours alone"
    )


def own_folder(base: Path, uid: int) -> str | None:
    """Make base (0700) where it is missing; why it cannot be used, or None when it is this user's alone."""
    try:
        with contextlib.suppress(FileExistsError):
            base.mkdir(mode=0o700)
        st = base.lstat()
    except OSError as e:
        return f"cannot be made ({e.strerror or e})"
    # rig.safefs's trust rule, and the user's own (a folder of root's there is not one it can write).
    if problem := safefs.distrust(st, safefs.Trust(uid), folder=True):
        return problem
    return None if st.st_uid == uid else f"belongs to {safefs.owner_name(st.st_uid)}, not to you"


def prepared(
    environ: Mapping[str, str], uid: int, is_read_only: Callable[[Path], bool] = read_only
) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """The environment with every read-only place moved to the user's own, and the log lines
    ((logging level, text)) that say so. Run as the user who runs the command."""
    env = dict(environ)
    base = private_base(env, uid)
    moves = decide(env, base, is_read_only)
    if not moves.env:
        return env, []
    why = own_folder(base, uid)
    if why is not None:
        return env, [
            (
                logging.WARNING,
                f"the image's folders are read-only here and {base} {why}; set TMPDIR to a folder of "
                "yours, or bind writable folders at /workspace and /cache",
            )
        ]
    if moves.config_dir is not None:
        try:
            settings.fallback(moves.config_dir, moves.runs_dir)
        except (OSError, safefs.Skipped) as e:
            caches = {k: v for k, v in moves.env.items() if k != settings.VARIABLE}
            why = f"Ultralytics' settings stay the image's, read-only ({moves.config_dir}: {e})"
            baked = {settings.VARIABLE: str(settings.BAKED_CONFIG_DIR)}
            return env | caches | baked, [(logging.WARNING, why)]
    env.update(moves.env)
    return env, [(logging.INFO, line(moves, base))]


def prepare_process(euid: int | None = None, is_read_only: Callable[[Path], bool] = read_only) -> None:
    """For rig's own commands that write: the host's breaking variables dropped and the read-only
    places moved, in this process's environment (and in rig.USER_ENVIRON, which the launch's
    decisions read), so the command and everything it starts see the same."""
    euid = os.geteuid() if euid is None else euid
    before = dict(os.environ)
    cleaned = hostenv.cleaned(before)
    if cleaned.dropped:
        _logger.warning("%s", hostenv.line(cleaned.dropped))
    env = cleaned.env
    if euid != 0:  # root keeps the image's baked settings and its own caches (rig exec)
        env, lines = prepared(env, euid, is_read_only)
        for level, text in lines:
            _logger.log(level, "%s", text)
    for target in (os.environ, rig.USER_ENVIRON):
        for name in before.keys() - env.keys():
            target.pop(name, None)
        for name, value in env.items():
            if before.get(name) != value:
                target[name] = value
