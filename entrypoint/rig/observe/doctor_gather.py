"""Discovery for `rig doctor`: read the box once into `doctor.Facts`.

Everything is read through `root` (/proc, /sys, /dev/shm, /datasets), so tests point it at a fake
tree; NVML is an injectable module. Each probe that fails becomes a fact (an error string), never
an exception: the doctor must report on a broken box, not crash on it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rig import origins, paths, safefs, versions
from rig.errors import RigError
from rig.hardware import choice, fabric
from rig.hardware.nvml import describe_error, session
from rig.hardware.topology import read_topology, visible_entries
from rig.launch import batch as launch_batch
from rig.launch import nodes
from rig.launch.binding import make_plan
from rig.observe import bench as rig_bench
from rig.observe.bench import BenchResult
from rig.observe.doctor import DatasetFacts, Facts, GpuFact
from rig.workstation import userenv
from rig.yolo import datasets, settings, tuning, ultra
from rig.yolo.nodecache import cached_dataset, imagecache

SAMPLE_FILES = 256
SAMPLE_BYTES = 256 << 20
SAMPLE_SECONDS = 10.0


def driver_from_proc(root: Path) -> str | None:
    """The kernel module's version, e.g. 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15 ...'."""
    try:
        text = (root / "proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    m = re.search(r"NVRM version:.*?\s(\d{3,}\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def read_limits(root: Path) -> dict[str, tuple[int, int]]:
    """/proc/self/limits rows as (soft, hard) bytes, -1 for unlimited."""
    out: dict[str, tuple[int, int]] = {}
    try:
        text = (root / "proc/self/limits").read_text()
    except OSError:
        return out
    for line in text.splitlines()[1:]:
        m = re.match(r"^(.*?)\s{2,}(\S+)\s+(\S+)", line)
        if not m:
            continue

        def value(v: str) -> int:
            return -1 if v == "unlimited" else int(v)

        with contextlib.suppress(ValueError):
            out[m.group(1).strip()] = (value(m.group(2)), value(m.group(3)))
    return out


def read_status(root: Path) -> dict[str, str]:
    try:
        text = (root / "proc/self/status").read_text()
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def requested_gpus(gpus: str | None, environ: Mapping[str, str]) -> tuple[choice.Choice, str]:
    """What was asked for: --gpus as `rig train` reads it (N, all, or ids 0,2), else the toolkit's
    NVIDIA_VISIBLE_DEVICES as a count; 'all' when nothing narrower was asked. And where it came from."""
    if gpus is not None and (asked := choice.parse_gpus(gpus)) != "all":
        return asked, f"--gpus {gpus.strip()}"
    visible = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if visible and visible not in ("all", "void", "none"):
        return len(visible_entries(visible)), f"NVIDIA_VISIBLE_DEVICES={visible}"
    return "all", ""


def torch_arch_flags() -> tuple[str, ...] | None:
    """The GPU code this image's torch was built with ('sm_80 sm_86 sm_90 ...'); readable without a
    GPU, unlike torch.cuda.get_arch_list(). None without a CUDA torch."""
    try:
        flags = importlib.import_module("torch")._C._cuda_getArchFlags()
    except Exception:  # no torch (the host's tests), a CPU build, a private API gone
        return None
    return tuple(str(flags).split()) if flags else None


def _capability(nvml: Any, index: int) -> tuple[int, int] | None:
    try:
        return nvml.capability(index)  # type: ignore[no-any-return]
    except Exception:  # NotSupported on an old driver: the kernels check then skips that GPU
        return None


def _hex(value: str | None) -> int | None:
    try:
        return int(value, 16) if value else None
    except ValueError:
        return None


def gather(
    *,
    root: Path = Path("/"),
    environ: Mapping[str, str] | None = None,
    nvml_module: Any | None = None,
    data: str | None = None,
    bench: bool = False,
    gpus: str | None = None,
    batch: int = ultra.DEFAULT_BATCH,
    imgsz: int = ultra.DEFAULT_IMGSZ,
    arch_flags: tuple[str, ...] | None = None,
    python_path: Sequence[str] | None = None,
    turned_off: Callable[[origins.Origin], Sequence[str]] | None = None,
    euid: int | None = None,
) -> Facts:
    """arch_flags: torch's GPU code; None reads it from the installed torch (torch_arch_flags).
    python_path: the image's Python's folders (sys.path). turned_off: what the Ultralytics a session
    imports cannot run, one line per feature (nothing_off when None). euid: whose sessions (root's
    import no user's folders); this process's when None."""
    env = os.environ if environ is None else environ
    with session(nvml_module) as (nvml, state):
        driver, gpu_facts, nvml_error = None, [], None if nvml is not None else state
        if nvml is not None:
            try:
                driver = nvml.driver_version()
                gpu_facts = [GpuFact(g.index, g.name, _capability(nvml, g.index)) for g in nvml.gpus()]
            except Exception as e:  # a GPU fell off the bus, a driver/library mismatch...
                nvml_error = f"NVML error ({describe_error(e)})"
    if driver is None:
        driver = driver_from_proc(root)

    asked, requested_from = requested_gpus(gpus, env)
    requested = None if asked == "all" else len(asked) if isinstance(asked, list) else int(asked)
    topology, topology_error, plan = None, None, None
    try:
        topology = read_topology(root, environ=env)
        # The GPUs `rig train` would use; those missing are the gpus check's to report.
        if ids := choice.usable_gpus(asked, len(topology.gpus)):
            plan = make_plan(topology, len(ids), ids)
    except RigError as e:
        topology_error = str(e)
    except Exception as e:  # sparse or odd sysfs (VMs, gVisor): report it, keep checking the rest
        topology_error = describe_error(e)

    limits = read_limits(root)
    status = read_status(root)
    seccomp = status.get("Seccomp")
    shm_total, shm_free = tuning.shm_bytes(root)
    numa_nodes = len(topology.node_cpus) if topology is not None and topology.node_cpus else 1
    nranks = len(plan.ranks) if plan is not None else 1
    rank_cpus = min((len(r.cpus) for r in plan.ranks), default=1) if plan is not None else 1

    dataset = (
        gather_dataset(data, root, batch=batch, imgsz=imgsz, nranks=nranks, rank_cpus=rank_cpus)
        if data
        else None
    )
    bench_result, bench_error = run_bench(data, batch=batch, imgsz=imgsz) if bench else (None, None)
    return Facts(
        driver_version=driver,
        nvml_error=nvml_error,
        gpus=tuple(gpu_facts),
        requested_gpus=requested,
        requested_from=requested_from,
        topology=topology,
        topology_error=topology_error,
        plan=plan,
        shm_total=shm_total,
        shm_free=shm_free,
        batch=batch,
        imgsz=imgsz,
        shm_batches_per_worker=tuning.SHM_BATCHES_PER_WORKER,
        memlock=limits.get("Max locked memory", (-1, -1)),
        stack=limits.get("Max stack size", (-1, -1)),
        seccomp=int(seccomp) if seccomp and seccomp.isdigit() else None,
        cap_bnd=_hex(status.get("CapBnd")),
        numa_nodes=numa_nodes,
        dataset=dataset,
        bench=bench_result,
        bench_error=bench_error,
        bench_requested=bench,
        **user_packages(root),
        **ultralytics_facts(root, env, sys.path if python_path is None else python_path, turned_off, euid),
        cuda_stack=env.get(versions.STACK_ENV, versions.DEFAULT_STACK),
        arch_flags=arch_flags if arch_flags is not None or not gpu_facts else torch_arch_flags(),
        settings_file=str(settings.settings_file(env)),
        settings_problem=settings.problem(env, root),
        fabric=fabric.read_fabric(root, env),
        nnodes=node_count(env),
    )


def node_count(environ: Mapping[str, str]) -> int:
    """The nodes this run spans, as `rig train` reads the schedulers' variables; 1 where they are
    unreadable (`rig train` says why in one line)."""
    try:
        return nodes.node_spec(environ).nnodes
    except RigError:
        return 1


def nothing_off(found: origins.Origin) -> Sequence[str]:
    """What turned off for this Ultralytics: nothing known here (the contract check fills it in)."""
    return ()


def ultralytics_facts(
    root: Path,
    environ: Mapping[str, str],
    python_path: Sequence[str],
    turned_off: Callable[[origins.Origin], Sequence[str]] | None,
    euid: int | None = None,
) -> dict[str, Any]:
    """The Ultralytics a session of this user imports and the image's, found without importing either."""
    ours = origins.find("ultralytics", origins.session_path(environ, python_path, euid), str(root))
    image = origins.find("ultralytics", origins.image_path(environ, python_path), str(root))
    off = tuple((turned_off or nothing_off)(ours)) if ours is not None and ours != image else ()
    return {"ultralytics": ours, "image_ultralytics": image, "ultralytics_off": off}


def user_packages(root: Path) -> dict[str, Any]:
    """What user yolo added with `pip install`, each with the image's pin of that name (if any)."""
    site = userenv.site_packages(root / paths.HOME.relative_to("/"))
    try:
        pins = userenv.pins((root / userenv.LOCK.relative_to("/")).read_text())
    except OSError:
        pins = {}
    found = tuple((n, v, _pinned(n, pins)) for n, v in userenv.added(site))
    return {"user_packages": found, "user_site": str(userenv.site_packages())}


def _pinned(name: str, pins: Mapping[str, str]) -> str | None:
    """The image's pin that `name` shadows, as the doctor names it: its version, or for a package
    that installs the same module under another name (plain `ultralytics`), that name and version."""
    found = userenv.pinned_as(name, pins)
    if found is None:
        return None
    pinned, version = found
    return version if pinned == userenv.normalize(name) else f"{pinned} {version}"


# ------------------------------------------------------------------------------------------ dataset
def train_images(path: Path, datasets_dir: Path) -> list[Path]:
    """The train split's image files (rig.yolo.datasets); a folder's images for a folder.
    Raises DatasetError."""
    if path.is_dir():
        return datasets.images_in(path)
    datasets.check(str(path), datasets_dir)  # what `rig train` refuses, said the same way
    spec = datasets.load(path, datasets_dir)
    missing = spec.missing_train()
    if missing is not None:
        raise datasets.DatasetError(f"train split {missing} does not exist")
    return datasets.train_images(spec)


def read_sample(images: list[Path]) -> tuple[int, int, float, tuple[str, ...]]:
    """Read an even spread of the files once: (files read, bytes, seconds, unreadable files)."""
    step = max(len(images) // SAMPLE_FILES, 1)
    sample = images[::step][:SAMPLE_FILES]
    n, size, bad = 0, 0, []
    start = time.perf_counter()
    for p in sample:
        try:
            # Opened without blocking: a FIFO swapped in since the listing is unreadable, not a hang.
            with open(safefs.open_input(p), "rb", buffering=0) as f:
                while chunk := f.read(1 << 20):
                    size += len(chunk)
            n += 1
        except (OSError, safefs.Skipped):
            bad.append(str(p))
        if size >= SAMPLE_BYTES or time.perf_counter() - start > SAMPLE_SECONDS:
            break
    return n, size, time.perf_counter() - start, tuple(bad)


def gather_dataset(
    data: str, root: Path, *, batch: int, imgsz: int, nranks: int, rank_cpus: int
) -> DatasetFacts:
    datasets_dir = ultra.datasets_dir(root=root)
    path = datasets.locate(data, datasets_dir)
    if path is None:
        return DatasetFacts(data, error=f"not found (looked in the working directory and {datasets_dir})")
    try:
        images = train_images(path, datasets_dir)
    except (OSError, datasets.DatasetError) as e:
        return DatasetFacts(data, path=str(path), error=str(e))
    n, size, seconds, bad = read_sample(images)
    decisions = tuning.decide(
        user_args={"imgsz": str(imgsz)},
        rank_batch=launch_batch.share(batch, nranks).per_rank,  # the ranks share the total
        train_images=len(images) or None,
        resources=tuning.read_resources(root),
        rank_cpus=rank_cpus,
        nranks=nranks,
    )
    cache = next((d for d in decisions if d.key == "cache"), None)
    return DatasetFacts(
        data,
        path=str(path),
        images=len(images),
        sampled=n,
        sampled_bytes=size,
        read_s=seconds,
        unreadable=bad,
        cache_value=cache.value if cache else None,
        cache_reason=cache.reason if cache else "",
        **image_cache_facts(images, imgsz),
    )


def image_cache_facts(images: list[Path], imgsz: int) -> dict[str, Any]:
    """The node image cache's file for these images: where, how big, how much is in the page cache."""
    try:
        where = cached_dataset.cache_file([str(p) for p in images], imgsz)
    except (ImportError, OSError) as e:  # no OpenCV/Ultralytics here, an image gone meanwhile
        return {"image_cache_error": f"node image cache not looked up ({describe_error(e)})"}
    index = imagecache.read_index(where)
    if index is None:
        return {"image_cache_path": str(where)}
    return {
        "image_cache_path": str(where),
        "image_cache_bytes": where.stat().st_size,
        "image_cache_resident": imagecache.resident_bytes(where),
    }


# -------------------------------------------------------------------------------------------- bench
def run_bench(data: str | None, *, batch: int, imgsz: int) -> tuple[BenchResult | None, str | None]:
    """`rig bench --quick` on the user's data (or its generated shapes): loader vs train step."""
    try:
        # The loader against the step: no levers, no stock run, nothing recorded for rig train.
        opts = rig_bench.BenchOptions(
            data=data,
            quick=True,
            batch=batch,
            imgsz=imgsz,
            levers=(),
            parts=("loader", "tail", "step", "run"),
            record=False,
        )
        result = rig_bench.run_bench(opts)
    except Exception as e:  # a broken bench is a failed check, not a crashed doctor
        return None, describe_error(e)
    return result, None
