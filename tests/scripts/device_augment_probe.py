"""Probes of rig.yolo.device_augment, run inside the image by tests/image/test_device_augment.py and
on a GPU by tools/gpu_check_augment.sh.

  batches DATA DEVICE CACHE WORKERS KERNELS
                                     stock training batches against ours finished on DEVICE, same seeds:
                                     labels equal, pixels within 1 level (cache: ram, disk or none;
                                     kernels: torch, opencv or auto)
  synthetic DEVICE KERNELS           Ultralytics' RandomHSV + Format against the device tail, per image,
                                     on random and extreme images with the gains RandomHSV drew
  gains N                            N draws: ours equal Ultralytics' draw for draw, same RNG use, and
                                     their distribution is uniform(-gain, gain) (Kolmogorov-Smirnov)
  tail DEVICE BATCH IMGSZ            the device tail's time per batch (synchronised), ms
Each prints one `PROBE {json}` line per measure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from typing import Any

os.environ.setdefault("YOLO_VERBOSE", "False")

import numpy as np
import torch
from rig import log
from rig.yolo import device_augment, hsv_device
from rig.yolo.nodecache import cached_dataset
from ultralytics.cfg import get_cfg
from ultralytics.data import build_dataloader, build_yolo_dataset
from ultralytics.data.augment import Format, RandomHSV
from ultralytics.data.utils import check_det_dataset
from ultralytics.utils.torch_utils import init_seeds

IMGSZ, BATCH = 160, 4
HYP = (0.015, 0.7, 0.4)  # Ultralytics' default hsv_h, hsv_s, hsv_v


def report(**values: Any) -> None:
    os.write(1, ("PROBE " + json.dumps(values) + "\n").encode())


def compare(stock: Any, ours: Any) -> dict[str, Any]:
    d = (stock.to(torch.int16) - ours.to(torch.int16)).abs()
    return {
        "pixels": d.numel(),
        "within1": float((d <= 1).float().mean()),
        "max": int(d.max()),
        "exact": float((d == 0).float().mean()),
    }


def dataset(data: dict[str, Any], cache: str, ours: bool) -> Any:
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "batch": BATCH, "cache": False if cache == "none" else cache})
    init_seeds(0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(cached_dataset.in_use(cfg))
        if ours:
            stack.enter_context(device_augment.in_use("train", {}))
        return build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", stride=32)


def first_batches(ds: Any, workers: int, n: int = 3) -> list[dict[str, Any]]:
    init_seeds(0)
    loader = build_dataloader(ds, BATCH, workers, shuffle=True, rank=-1, device="cpu")
    it = iter(loader)
    out = [next(it) for _ in range(n)]
    loader.close()
    return out


def batches(data_yaml: str, device: str, cache: str, workers: str, kernels: str = "auto") -> None:
    data = check_det_dataset(data_yaml)
    stock_ds, ours_ds = dataset(data, cache, False), dataset(data, cache, True)
    stock, ours = first_batches(stock_ds, int(workers)), first_batches(ours_ds, int(workers))
    labels_equal, stats = True, []
    for a, b in zip(stock, ours, strict=True):
        labels_equal &= all(torch.equal(a[k], b[k]) for k in ("cls", "bboxes", "batch_idx"))
        labels_equal &= a["im_file"] == b["im_file"]
        raw_shape = list(b["img"].shape)
        finished = device_augment.finish(b, torch.device(device), None if kernels == "auto" else kernels)
        stats.append(compare(a["img"], finished["img"].cpu()) | {"raw": raw_shape})
    px = sum(s["pixels"] for s in stats)
    report(
        mode="batches",
        device=device,
        kernels=kernels,
        cache=cache,
        workers=int(workers),
        cls=type(ours_ds).__name__,
        labels_equal=labels_equal,
        shape=list(stock[0]["img"].shape),
        raw_shape=stats[0]["raw"],
        within1=sum(s["within1"] * s["pixels"] for s in stats) / px,
        exact=sum(s["exact"] * s["pixels"] for s in stats) / px,
        max=max(s["max"] for s in stats),
        stock_transforms=[type(t).__name__ for t in stock_ds.transforms.transforms],
        ours_transforms=[type(t).__name__ for t in ours_ds.transforms.transforms],
    )


def _images(rng: np.random.Generator) -> list[np.ndarray]:
    h, w = 96, 128
    grey = np.repeat(rng.integers(0, 256, (h, w, 1), dtype=np.uint8), 3, axis=2)
    pure = np.zeros((h, w, 3), np.uint8)
    pure[: h // 2, :, 2] = 255
    pure[h // 2 :, : w // 2] = 255  # white: lut_sat[0] = 0 keeps it white
    ramp = np.stack(np.meshgrid(np.linspace(0, 255, w), np.linspace(0, 255, h)), -1).astype(np.uint8)
    ramp = np.concatenate([ramp, ramp[..., :1][:, ::-1]], -1)
    noise = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(5)]
    return [grey, pure, np.ascontiguousarray(ramp), *noise]


def synthetic(device: str, kernels: str = "auto") -> None:
    rng = np.random.default_rng(0)
    deferred_hsv, deferred_format = device_augment._deferred_classes()
    stats = []
    for hyp in (HYP, (0.5, 0.5, 0.5), (0.0, 0.0, 0.0), (0.015, 0.0, 0.0), (1.0, 0.9, 0.9)):
        for i, img in enumerate(_images(rng)):
            for bgr, flip in ((0.0, None), (1.0, None), (0.0, np.fliplr), (0.0, np.flipud), (1.0, np.fliplr)):
                seed = 1000 * len(stats) + i
                flipped = flip or (lambda a: a)  # RandomFlip's output: a view of the image
                np.random.seed(seed)
                random.seed(seed)
                labels = RandomHSV(*hyp).apply_image({"img": img.copy()})
                stock = Format(bgr=bgr).apply_image({"img": flipped(labels["img"])})["img"]
                np.random.seed(seed)
                random.seed(seed)
                labels = deferred_hsv(*hyp).apply_image({"img": img.copy()})
                labels["img"] = flipped(labels["img"])
                labels = deferred_format(bgr=bgr).apply_image(labels)
                raw = labels["img"][None].to(device)
                rows = labels[device_augment.KEY][None]
                ours = hsv_device.tail(raw, rows, None if kernels == "auto" else kernels)[0].cpu()
                stats.append(compare(stock, ours))
    px = sum(s["pixels"] for s in stats)
    report(
        mode="synthetic",
        device=device,
        kernels=kernels,
        cases=len(stats),
        within1=sum(s["within1"] * s["pixels"] for s in stats) / px,
        exact=sum(s["exact"] * s["pixels"] for s in stats) / px,
        max=max(s["max"] for s in stats),
    )


def _ks(sample: np.ndarray, lo: float, hi: float) -> float:
    """Kolmogorov-Smirnov distance of sample from uniform(lo, hi)."""
    x = np.sort((sample - lo) / (hi - lo))
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - x), np.max(x - np.arange(n) / n)))


def gains(n: str) -> None:
    count = int(n)
    img = np.full((8, 8, 3), 128, np.uint8)
    deferred_hsv, _ = device_augment._deferred_classes()
    real_uniform, drawn = np.random.uniform, []

    def spy(*args: Any, **kwargs: Any) -> Any:  # records what Ultralytics' RandomHSV draws
        out = real_uniform(*args, **kwargs)
        drawn.append(out)
        return out

    np.random.seed(7)
    np.random.uniform = spy
    try:
        for _ in range(count):
            RandomHSV(*HYP).apply_image({"img": img.copy()})
    finally:
        np.random.uniform = real_uniform
    stock = np.stack(drawn) * HYP
    stock_state = np.random.get_state()[1].copy()
    np.random.seed(7)
    ours = np.array([deferred_hsv(*HYP).apply_image({"img": img})["rig_hsv_gains"][1:] for _ in range(count)])
    same_state = bool(np.array_equal(stock_state, np.random.get_state()[1]))
    np.random.seed(8)  # an independent stream: the distribution, not the draws
    other = np.array(
        [deferred_hsv(*HYP).apply_image({"img": img})["rig_hsv_gains"][1:] for _ in range(count)]
    )
    report(
        mode="gains",
        draws=count,
        draw_for_draw=bool(np.array_equal(stock, ours)),
        same_rng_use=same_state,
        ks_vs_uniform=[_ks(other[:, c], -HYP[c], HYP[c]) for c in range(3)],
        ks_stock_vs_uniform=[_ks(stock[:, c], -HYP[c], HYP[c]) for c in range(3)],
        ks_critical_01pct=1.95 / np.sqrt(count),
        mean=other.mean(0).tolist(),
        std=other.std(0).tolist(),
        stock_std=stock.std(0).tolist(),
    )


def tail(device: str, batch: str, imgsz: str) -> None:
    dev = torch.device(device)
    b, s = int(batch), int(imgsz)
    img = torch.randint(0, 256, (b, s, s, 3), dtype=torch.uint8).pin_memory() if dev.type == "cuda" else None
    if img is None:
        img = torch.randint(0, 256, (b, s, s, 3), dtype=torch.uint8)
    rows = torch.tensor(
        [[1.0, 0.01, 0.5, -0.3, 1.0, float(i % 2), 0.0] for i in range(b)], dtype=torch.float64
    )
    times = []
    for i in range(23):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        out = device_augment.finish({"img": img, device_augment.KEY: rows}, dev)["img"].float() / 255
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    ms = 1000 * float(np.median(times))
    report(
        mode="tail",
        device=device,
        batch=b,
        imgsz=s,
        ms_per_batch=ms,
        ms_per_image=ms / b,
        shape=list(out.shape),
    )


if __name__ == "__main__":
    log.setup()
    command, args = sys.argv[1], sys.argv[2:]
    {"batches": batches, "synthetic": synthetic, "gains": gains, "tail": tail}[command](*args)
