"""`rig bench --ranks N`: Ultralytics' `cache=ram` (a copy per rank) against the node image cache.

N processes stand for the N ranks of one node: each builds the train dataset with `cache=ram` as
a rank does, all at the same moment, then iterates its train loader while the others do (img/s
summed over the ranks). Three phases, fresh processes each:
  stock      Ultralytics' own cache: every process decodes every image and keeps its copy;
  ours       the node image cache, cold (an empty cache folder): one process builds, the others map;
  ours warm  the same again, the file already there: a second run.
The ours phases build as `rig train` does, the pixel work left to the device (rig.yolo.augment,
unless RIG_DEVICE_AUGMENT=0), so their loader rate is the workers' and the collate's alone.
Memory the cache holds on the node: what the processes' anonymous memory grew by while building
(/proc/self/smaps_rollup Pss_Anon + Pss_Shmem: Ultralytics' buffer is anonymous, a mapped file is
not), plus the cache file's bytes in the page cache (mincore).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queues
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig import log
from rig.yolo import ultra
from rig.yolo.nodecache import imagecache

_logger = log.get("bench")
PHASES = ("stock", "ours", "ours warm")
TIMEOUT_S = 1800  # a phase that takes longer is broken: the bench fails instead of hanging


@dataclass(frozen=True)
class CacheResult:
    """Stock cache=ram against the node image cache, N ranks on one node."""

    ranks: int
    images: int
    one_copy_bytes: int  # the decoded images once
    stock_node_bytes: int
    ours_node_bytes: int
    stock_build_s: float  # from the ranks' common start to the last rank's dataset
    ours_build_s: float
    ours_warm_build_s: float
    stock_img_s: float  # train loader, summed over the ranks running at once
    ours_img_s: float
    ours_warm_img_s: float
    workers_per_rank: int


@dataclass(frozen=True)
class _Job:
    phase: str
    data: dict[str, Any]
    imgsz: int
    batch: int
    workers: int
    batches: int
    cache_dir: str


def _anon_bytes() -> int:
    """This process's anonymous and shared-memory proportional set size."""
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[name] = int(parts[0]) * 1024
    if "Pss_Anon" in fields:
        return fields["Pss_Anon"] + fields.get("Pss_Shmem", 0)
    return fields.get("Pss", 0)  # kernels before 5.8 do not split Pss


def _rank(job: _Job, rank: int, barrier: Any, results: Any) -> None:
    """One rank: build the dataset at the common start, then run its loader with the others."""
    os.environ.update(
        {imagecache.CACHE_DIR_ENV: job.cache_dir, "LOCAL_RANK": str(rank), "YOLO_VERBOSE": "False"}
    )
    from rig.yolo import augment
    from rig.yolo.augment import device

    cfg = ultra.get_cfg({"imgsz": job.imgsz, "batch": job.batch, "cache": "ram"})
    barrier.wait(TIMEOUT_S)
    before, t0 = _anon_bytes(), time.monotonic()
    with contextlib.ExitStack() as hooks:
        if job.phase != "stock":  # as rig train builds it: the node cache, pixels left to the device
            hooks.enter_context(augment.building(cfg, "train", exact=False, guards=False, announce=False))
        ds = ultra.build_yolo_dataset(cfg, job.data["train"], job.batch, job.data, mode="train", stride=32)
    t1 = time.monotonic()
    results.put(("built", rank, t0, t1, _anon_bytes() - before))
    loader = ultra.build_dataloader(ds, job.batch, job.workers, shuffle=True, rank=-1, device="cpu")
    it = iter(loader)
    for _ in range(job.workers + 1):  # worker start-up is not throughput
        next(it)
    barrier.wait(TIMEOUT_S)
    n, t = 0, time.monotonic()
    for _ in range(job.batches):
        with contextlib.suppress(StopIteration):
            n += device.images_in(next(it))
    results.put(("loader", rank, n, t, time.monotonic()))
    with contextlib.suppress(RuntimeError):  # a worker dying at shutdown, after the measurement
        loader.close()


def _phase(job: _Job, ranks: int) -> tuple[float, int, float]:
    """(build wall time, anonymous bytes gained over the ranks, loader img/s over the ranks)."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as torchrun starts its ranks
    barrier, results = ctx.Barrier(ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(job, r, barrier, results)) for r in range(ranks)]
    for p in procs:
        p.start()
    built: list[tuple[float, float, int]] = []
    rates: list[tuple[int, float, float]] = []  # images, start, end
    try:
        while len(built) < ranks or len(rates) < ranks:
            try:
                msg = results.get(timeout=5)
            except queues.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError(f"a {job.phase} rank failed; run with one rank to see why") from None
                continue
            if msg[0] == "built":
                built.append((msg[2], msg[3], msg[4]))
            else:
                rates.append((msg[2], msg[3], msg[4]))
        for p in procs:
            p.join(60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    wall = max(b[1] for b in built) - min(b[0] for b in built)
    # The node's rate: every rank's images over the span from the first start to the last end (a sum
    # of per-rank rates would count a rank that finishes early, leaving its CPUs to the others, twice).
    loader = sum(r[0] for r in rates) / (max(r[2] for r in rates) - min(r[1] for r in rates))
    return wall, sum(b[2] for b in built), loader


def run(
    data: Mapping[str, Any], *, ranks: int, imgsz: int, batch: int, workers: int | None, batches: int
) -> CacheResult:
    """The three phases on data (a checked data dict), in a cache folder of their own."""
    per_rank = workers if workers is not None else max(len(os.sched_getaffinity(0)) // ranks, 1)
    base = imagecache.cache_dir(os.environ).parent
    try:
        base.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="bench-", dir=base))
    except OSError:
        scratch = Path(tempfile.mkdtemp(prefix="rig-bench-cache-"))
    try:
        out: dict[str, tuple[float, int, float]] = {}
        for phase in PHASES:
            job = _Job(phase, dict(data), imgsz, batch, per_rank, batches, str(scratch))
            out[phase] = _phase(job, ranks)
            _logger.info(
                "cache %s, %d ranks: built in %.2f s, loader %.1f img/s",
                phase,
                ranks,
                out[phase][0],
                out[phase][2],
            )
            if phase == "ours":
                files = list((scratch / imagecache.SUBDIR).glob(f"*{imagecache.SUFFIX}"))
                if len(files) != 1:
                    raise RuntimeError(f"expected one cache file in {scratch}, found {len(files)}")
                index = imagecache.read_index(files[0])
                resident = imagecache.resident_bytes(files[0])
        assert index is not None
        return CacheResult(
            ranks=ranks,
            images=len(index.records),
            one_copy_bytes=index.data_bytes,
            stock_node_bytes=out["stock"][1],
            ours_node_bytes=out["ours"][1] + resident,
            stock_build_s=out["stock"][0],
            ours_build_s=out["ours"][0],
            ours_warm_build_s=out["ours warm"][0],
            stock_img_s=out["stock"][2],
            ours_img_s=out["ours"][2],
            ours_warm_img_s=out["ours warm"][2],
            workers_per_rank=per_rank,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def default_ranks() -> int:
    """The ranks `rig train` would start here: one per GPU it would use, and 2 on a CPU-only box."""
    try:
        from rig.hardware import choice
        from rig.hardware.topology import read_topology

        gpus = len(choice.usable_gpus(choice.parse_gpus(None), len(read_topology(Path("/")).gpus)))
    except Exception:  # no sysfs to read: a CPU box as far as the bench is concerned
        gpus = 0
    return gpus or 2


def format_rows(res: CacheResult) -> list[tuple[str, str, str]]:
    """Rows for rig bench's table: (measure, img/s, notes)."""
    gib, one = imagecache.GIB, max(res.one_copy_bytes, 1)
    stock, ours = res.stock_node_bytes, res.ours_node_bytes
    memory = f"stock {stock / gib:.2f} GiB, ours {ours / gib:.2f} GiB"
    memory += f" ({stock / one:.2f} vs {ours / one:.2f} copies)"
    builds = (
        f"stock {res.stock_build_s:.2f} s, ours {res.ours_build_s:.2f} s, again {res.ours_warm_build_s:.2f} s"
    )
    return [
        (f"cache=ram, {res.ranks} ranks: node memory", "", memory),
        ("cache build (cold, second run)", "", builds),
        (
            "loader, stock cache=ram, all ranks",
            f"{res.stock_img_s:.1f}",
            f"{res.workers_per_rank} worker(s) per rank",
        ),
        (
            "loader, node image cache, all ranks",
            f"{res.ours_img_s:.1f}",
            f"second run {res.ours_warm_img_s:.1f}",
        ),
    ]
