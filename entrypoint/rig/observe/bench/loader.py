"""The train data loader alone: stock Ultralytics settings against ours, in alternating rounds so drift
(thermal, page cache, neighbours) hits both; and the data the bench measures on."""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rig import log
from rig.launch import batch as launch_batch
from rig.observe.bench import tail
from rig.observe.bench.results import BenchOptions, LoaderResult, Plan
from rig.yolo import augment, contract, overlay, tuning, ultra

_logger = log.get("bench")
LOADER_KEYS = ("cache", "workers")


def settings(
    opts: BenchOptions, train_images: int | None, batch: int
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The loader settings for stock and ours, and the reasons for ours."""
    cfg = ultra.default_cfg()
    # In the image cfg is already ours and upstream.yaml records what the overlay replaced; in a
    # plain environment (tools/gpu_check.sh) cfg is stock and the overlay is read from
    # RIG_CONFIGS_DIR. Keys the overlay leaves alone are the same in both.
    upstream, ours_static = overlay.upstream_values(), overlay.overlay_values()
    defaults = {"cache": cfg["cache"], "workers": cfg["workers"]}  # LOADER_KEYS
    stock: dict[str, Any] = {k: upstream.get(k, defaults[k]) for k in LOADER_KEYS}
    ours: dict[str, Any] = {k: ours_static.get(k, defaults[k]) for k in LOADER_KEYS}
    user: dict[str, str] = {"imgsz": str(opts.imgsz)}
    if opts.workers is not None:
        user["workers"] = str(opts.workers)
        ours["workers"] = opts.workers
    reasons = []
    for d in tuning.decide(
        user_args=user,
        rank_batch=launch_batch.share(batch, 1).per_rank,
        train_images=train_images,
        resources=tuning.read_resources(),
        rank_cpus=len(os.sched_getaffinity(0)),
        nranks=1,
    ):
        ours[d.key] = int(d.value) if d.key == "workers" else (False if d.value == "False" else d.value)
        reasons.append(f"{d.key}={d.value}: {d.reason}")
    return stock, ours, reasons


def dataset(
    data: dict[str, Any], opts: BenchOptions, cache: Any, batch: int, ours: bool = False
) -> tuple[Any, float]:
    """ours: as under `rig train`, cache=ram in the node image cache and the tail left to the device
    (unless RIG_DEVICE_AUGMENT=0)."""
    cfg = ultra.get_cfg({"imgsz": opts.imgsz, "batch": batch, "cache": cache})
    t0 = time.perf_counter()
    with contextlib.ExitStack() as hooks:
        if ours:
            hooks.enter_context(augment.building(cfg, "train", exact=False, guards=False))
        ds = ultra.build_yolo_dataset(cfg, data["train"], batch, data, mode="train", stride=32)
    return ds, time.perf_counter() - t0


def loader_img_s(dataset: contract.Dataset, batch: int, workers: int, batches: int, device: str) -> float:
    loader = ultra.build_dataloader(dataset, batch, workers, shuffle=True, rank=-1, device=device)
    try:
        it = forever(loader)
        for _ in range(max(workers, 1) + 1):  # worker start-up is not throughput
            next(it)
        n, t0 = 0, time.perf_counter()
        for _ in range(batches):
            n += tail.images_in(next(it))
        return n / (time.perf_counter() - t0)
    finally:
        loader.close()
        del loader
        gc.collect()


def forever(loader: contract.Loader) -> Iterator[Any]:
    """Batches across epoch ends: Ultralytics' loader keeps its workers between epochs."""
    while True:
        yield from loader


def batches(dataset: contract.Dataset, batch: int, count: int) -> list[dict[str, Any]]:
    """The first `count` batches of a dataset, in order, loaded in this process (the step's input)."""
    loader = ultra.build_dataloader(dataset, batch, 0, shuffle=False, rank=-1, device="cpu")
    out = []
    for b in forever(loader):
        out.append(b)
        if len(out) >= count:
            break
    return out


def measure(
    data: dict[str, Any], train_images: int | None, opts: BenchOptions, plan: Plan, batch: int, device: str
) -> tuple[LoaderResult | None, Any, dict[str, Any]]:
    """(the loader part of the result, ours' dataset for the parts after it, ours' loader settings).
    Without the loader part in opts.parts: None for the first."""
    stock, ours, reasons = settings(opts, train_images, batch)
    for reason in reasons:
        _logger.info("ours: %s", reason)
    ours_ds, ours_build_s = dataset(data, opts, ours["cache"], batch, ours=True)
    if "loader" not in opts.parts:
        return None, ours_ds, ours
    stock_ds, _ = dataset(data, opts, stock["cache"], batch)
    rates: dict[str, list[float]] = {"stock": [], "ours": []}
    for r in range(plan.rounds):  # alternate so drift hits both
        for name, ds, cfg in (("stock", stock_ds, stock), ("ours", ours_ds, ours))[
            :: 1 if r % 2 == 0 else -1
        ]:
            rates[name].append(loader_img_s(ds, batch, int(cfg["workers"]), plan.loader_batches, device))
            _logger.info("loader %s round %d: %.1f img/s", name, r + 1, rates[name][-1])
    del stock_ds
    gc.collect()
    stock_img_s, ours_img_s = statistics.median(rates["stock"]), statistics.median(rates["ours"])
    result = LoaderResult(
        stock_img_s=stock_img_s,
        ours_img_s=ours_img_s,
        speedup=ours_img_s / stock_img_s,
        stock_rounds=rates["stock"],
        ours_rounds=rates["ours"],
        stock=stock,
        ours=ours,
        ours_reasons=reasons,
        ours_dataset_build_s=ours_build_s,
    )
    return result, ours_ds, ours


def bench_data(opts: BenchOptions) -> Path:
    """The data yaml to measure on: the user's (as `rig train` hands it to Ultralytics), or the
    generated shapes, made once in the datasets volume."""
    if opts.data:  # a moved dataset: a copy with its root
        from rig.yolo import hostdata

        return Path(hostdata.resolve_args([f"data={opts.data}"])[0].removeprefix("data="))
    from rig.yolo.demo_data import YAML_NAME, make_demo_dataset

    # In the datasets volume, so it is generated once; a temporary directory if that is read-only.
    base = ultra.datasets_dir() / ".rig-bench"
    try:
        base.mkdir(parents=True, exist_ok=True)
        writable = os.access(base, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        base = Path(tempfile.gettempdir()) / "rig-bench"
    w, h = opts.source_size
    root = base / f"shapes-{opts.train_images}-{w}x{h}"
    if (root / YAML_NAME).is_file():
        return root / YAML_NAME
    _logger.info("generating %d images of %dx%d px in %s (once)", opts.train_images, w, h, root)
    return make_demo_dataset(root, train=opts.train_images, val=16, imgsz=w, height=h, force=root.exists())
