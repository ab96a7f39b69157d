"""Launch-time tuning: the Ultralytics arguments that depend on the machine, decided once per launch.

The static defaults live in configs/ (merged into Ultralytics' default.yaml at build time). What
cannot be static is decided here from the CPUs a rank is bound to, the RAM and /dev/shm the
container really has, and the dataset's size:

- `workers`: one loader process per CPU bound to the rank (not `os.cpu_count()`, which counts the
  host's CPUs and oversubscribes a pinned rank), capped by what /dev/shm can hold: every worker
  keeps batches in flight there, and a full /dev/shm kills the loader with a bus error.
- `cache`: `ram` when the decoded images fit in the RAM left after the loaders' /dev/shm. With
  the node image cache (rig.yolo.nodecache.imagecache: RIG_CACHE_DIR writable, with room) that is one copy
  per node, however many ranks: the ranks map one file, held in the page cache. Without it, every
  rank keeps its own copy with Ultralytics' 2x margin. Otherwise `False`, with the numbers.
  A classification dataset (a folder) is cached at full resolution by Ultralytics, never resized
  and never checked against RAM: it is sized from a sample of its images' headers, a copy per rank.

Discovery reads the world through `sys_root` and `datasets_dir`; `decide` is pure.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.yolo import datasets, ultra
from rig.yolo.nodecache import imagecache

GIB = 1 << 30
# Batches (of the train batch size) in /dev/shm per train worker: the train loader prefetches 4
# per worker, and the val loader runs twice the workers, each prefetching 2 at twice the batch
# (Ultralytics 8.4 build_dataloader and DetectionTrainer.get_dataloader); the train workers keep
# theirs while validation runs.
SHM_BATCHES_PER_WORKER = 4 + 2 * 2 * 2
# Ultralytics' check_cache_ram() refuses the RAM cache unless twice its size is available.
CACHE_RAM_MARGIN = 2.0


@dataclass(frozen=True)
class Decision:
    key: str
    value: str
    reason: str


@dataclass(frozen=True)
class Resources:
    """What the container can use, in bytes. node_cache_free: free space where the node image cache
    lives, None when it cannot be used (switched off, not writable)."""

    mem_available: int
    shm_free: int
    node_cache_free: int | None = None


# ---------------------------------------------------------------------------------------------
# Discovery


def _meminfo_available(sys_root: Path) -> int | None:
    try:
        text = (sys_root / "proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


# cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit number (9223372036854771712);
# anything this large is no limit.
CGROUP_V1_UNLIMITED = 1 << 60
# The memory controller's files, (limit, usage), as cgroup v2 and v1 name them inside a container.
_CGROUP_FILES = (
    ("sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory.current"),
    ("sys/fs/cgroup/memory/memory.limit_in_bytes", "sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def _cgroup_headroom(sys_root: Path) -> int | None:
    """Bytes the container's cgroup (v2, else v1) may still allocate, or None without a limit."""
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit = (sys_root / limit_file).read_text().strip()
        except OSError:
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= CGROUP_V1_UNLIMITED:
            return None
        try:
            usage = int((sys_root / usage_file).read_text().strip())
        except (OSError, ValueError):
            usage = 0
        return max(int(limit) - usage, 0)
    return None


def shm_bytes(sys_root: Path = Path("/")) -> tuple[int, int]:
    """/dev/shm's (total, free) bytes; (0, 0) where there is none."""
    try:
        st = os.statvfs(sys_root / "dev/shm")
    except OSError:
        return 0, 0
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def node_cache_free(sys_root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> int | None:
    """Free bytes where the node image cache goes (its folder, or the nearest existing parent), or
    None: switched off (RIG_IMAGE_CACHE=off) or not writable."""
    env = os.environ if environ is None else environ
    if not imagecache.enabled(env):
        return None
    where = sys_root / imagecache.cache_dir(env).relative_to("/")
    while not where.exists() and where != where.parent:
        where = where.parent
    if not os.access(where, os.W_OK):
        return None
    st = os.statvfs(where)
    return min(st.f_bavail * st.f_frsize, imagecache.max_bytes(env, st.f_blocks * st.f_frsize))


def read_resources(sys_root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> Resources:
    """RAM available (the smaller of MemAvailable and the cgroup headroom), free /dev/shm, and the
    room for the node image cache."""
    candidates = [v for v in (_meminfo_available(sys_root), _cgroup_headroom(sys_root)) if v is not None]
    return Resources(
        mem_available=min(candidates) if candidates else 0,
        shm_free=shm_bytes(sys_root)[1],
        node_cache_free=node_cache_free(sys_root, environ),
    )


# ---------------------------------------------------------------------------------------------
# Decision (pure)


def imgsz_of(user_args: Mapping[str, str]) -> int:
    """imgsz= as memory sees it: the long side (imgsz=640, imgsz=[640,480])."""
    nums = [int(n) for n in re.findall(r"\d+", user_args.get("imgsz", ""))]
    return max(nums) if nums else ultra.DEFAULT_IMGSZ


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def decide(
    *,
    user_args: Mapping[str, str],
    rank_batch: int,
    train_images: int | None,
    resources: Resources,
    rank_cpus: int,
    nranks: int,
    full_size_bytes: int | None = None,
) -> list[Decision]:
    """The `workers` and `cache` arguments to add when the user did not set them.

    rank_batch: the images a rank loads per step (rig.launch.batch decides it); nranks: the ranks on
    this node (they share its /dev/shm and RAM). full_size_bytes: a classification dataset's train
    images decoded at full resolution, what Ultralytics' `cache=ram` holds for it."""
    out: list[Decision] = []
    nranks = max(nranks, 1)
    imgsz = imgsz_of(user_args)
    batch_bytes = rank_batch * 3 * imgsz * imgsz
    shm_per_worker = SHM_BATCHES_PER_WORKER * batch_bytes * nranks  # one worker on every local rank

    if "workers" in user_args:
        try:
            workers = max(int(user_args["workers"]), 0)
        except ValueError:
            workers = 0
    else:
        by_cpu = max(rank_cpus, 1)
        by_shm = resources.shm_free // shm_per_worker
        workers = min(by_cpu, by_shm)
        if workers == by_cpu:
            reason = f"{rank_cpus} CPU(s) bound to this rank, one loader process each"
        elif workers > 0:
            reason = (
                f"/dev/shm has {_gib(resources.shm_free)} free, room for {workers} worker(s) per rank "
                f"of {rank_cpus} CPU(s); start with a larger --shm-size for more"
            )
        else:
            reason = (
                f"/dev/shm has {_gib(resources.shm_free)} free but one worker per rank needs "
                f"{_gib(shm_per_worker)}; loading in the main process (slow): start the container "
                f"with --shm-size={-(-rank_cpus * shm_per_worker // GIB)}g"
            )
        out.append(Decision("workers", str(workers), reason))

    if "cache" not in user_args:
        shm_in_use = workers * shm_per_worker
        budget = resources.mem_available - shm_in_use
        if full_size_bytes is not None:
            out.append(_classify_cache_decision(train_images or 0, full_size_bytes, nranks, budget))
        elif train_images is None:
            if resources.node_cache_free is not None:
                out.append(
                    Decision(
                        "cache",
                        "ram",
                        f"dataset size unknown; one copy per node shared by its {nranks} rank(s) "
                        "(node image cache, in the page cache: no OOM)",
                    )
                )
            elif nranks == 1:
                out.append(
                    Decision("cache", "ram", "dataset size unknown; Ultralytics checks its RAM itself")
                )
            else:
                out.append(
                    Decision("cache", "False", f"dataset size unknown, {nranks} ranks would each cache it")
                )
        else:
            out.append(_cache_decision(train_images, imgsz, nranks, budget, resources.node_cache_free))
    return out


def _cache_decision(images: int, imgsz: int, nranks: int, budget: int, node_free: int | None) -> Decision:
    one_copy = images * 3 * imgsz * imgsz  # at most: the long side is imgsz
    if node_free is not None and one_copy <= node_free:
        # One file in the page cache, mapped by every rank: no per-rank copy, and no 2x margin (it is
        # written image by image, never held twice; under pressure the kernel drops pages, no OOM).
        need: float = one_copy
        what = (
            f"{images} images at {imgsz} px = {_gib(need)}, one copy per node shared by its {nranks} rank(s) "
            "(node image cache)"
        )
    else:
        need = CACHE_RAM_MARGIN * nranks * one_copy
        where = (
            "node image cache off or its folder not writable"
            if node_free is None
            else f"only {_gib(node_free)} for the node image cache"
        )
        what = (
            f"{images} images at {imgsz} px x {nranks} rank(s) x {CACHE_RAM_MARGIN:g} margin = {_gib(need)}, "
            f"a copy per rank ({where})"
        )
    if need <= budget:
        return Decision("cache", "ram", f"{what} fits in {_gib(budget)} free RAM")
    return Decision("cache", "False", f"{what} exceeds {_gib(budget)} free RAM; images are decoded per step")


def _classify_cache_decision(images: int, one_copy: int, nranks: int, budget: int) -> Decision:
    need = CACHE_RAM_MARGIN * nranks * one_copy
    what = (
        f"classification: {images} images at full resolution = {_gib(one_copy)} (Ultralytics caches them "
        f"unresized, unchecked) x {nranks} rank(s) x {CACHE_RAM_MARGIN:g} margin = {_gib(need)}"
    )
    if need <= budget:
        return Decision("cache", "ram", f"{what} fits in {_gib(budget)} free RAM")
    return Decision("cache", "False", f"{what} exceeds {_gib(budget)} free RAM; images are decoded per step")


# Image headers read to size a classification dataset: enough for a mean, cheap on a million files.
CLASSIFY_SAMPLE = 64


def _pil_size(path: Path) -> tuple[int, int]:
    image: Any = importlib.import_module("PIL.Image")
    with image.open(path) as im:  # reads the header only
        w, h = im.size
    return int(w), int(h)


def classify_full_size(
    folder: Path, read_size: Callable[[Path], tuple[int, int]] = _pil_size
) -> tuple[int, int] | None:
    """(images, bytes decoded at full resolution) of a classification dataset's train split (its
    `train/` folder, else the folder), estimated from the headers of an even sample; None when it
    has no readable images."""
    train = folder / "train" if (folder / "train").is_dir() else folder
    images = datasets.images_in(train)
    if not images:
        return None
    step = max(len(images) // CLASSIFY_SAMPLE, 1)
    sizes = []
    for path in images[::step][:CLASSIFY_SAMPLE]:
        try:
            w, h = read_size(path)
        except Exception:  # an unreadable image: Ultralytics skips it too
            continue
        sizes.append(w * h * 3)
    if not sizes:
        return None
    return len(images), len(images) * sum(sizes) // len(sizes)


@dataclass(frozen=True)
class Dataset:
    """The dataset's size, as `decide` needs it (None: unknown)."""

    train_images: int | None = None
    full_size_bytes: int | None = None  # a classification dataset's, decoded at full resolution


def size_dataset(
    data: str | None, *, sys_root: Path = Path("/"), datasets_dir: Path | None = None
) -> Dataset:
    """Read the size of the dataset `data` names (None: no dataset to size)."""
    if datasets_dir is None:
        datasets_dir = ultra.datasets_dir(root=sys_root)
    located = datasets.locate(data, datasets_dir) if data else None
    if located is not None and located.is_dir():  # a classification dataset
        images, full_size = classify_full_size(located) or (None, None)
        return Dataset(images, full_size)
    return Dataset(datasets.count_train_images(data, datasets_dir) if data else None)


@dataclass(frozen=True)
class Node:
    """What the loader's decision reads of the node and the run (read once, by rig train's discovery)."""

    resources: Resources
    dataset: Dataset
    rank_cpus: int  # the CPUs bound to each rank
    nranks: int  # the ranks of this node


def decide_for(node: Node, *, user_args: Mapping[str, str], rank_batch: int) -> list[Decision]:
    """`decide` on what read_resources and size_dataset read."""
    return decide(
        user_args=user_args,
        rank_batch=rank_batch,
        train_images=node.dataset.train_images,
        resources=node.resources,
        rank_cpus=node.rank_cpus,
        nranks=node.nranks,
        full_size_bytes=node.dataset.full_size_bytes,
    )
