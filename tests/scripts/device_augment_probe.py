"""Probes of rig.yolo.augment, run inside the image by tests/image/test_device_augment.py and
on a GPU by tools/gpu_check.sh (its tail part).

  batches DATA DEVICE CACHE WORKERS KERNELS [HYP]
                                     stock training batches against ours finished on DEVICE, same seeds:
                                     labels equal (boxes, classes, masks), pixel differences counted
                                     (cache: ram, disk or none; kernels: torch, opencv or auto; HYP:
                                     comma-separated key=value overrides, e.g. degrees=10,hsv_h=0 or
                                     task=segment, rect=True)
  warp DEVICE KERNELS                Ultralytics' Mosaic canvas + RandomPerspective.apply_image (OpenCV)
                                     against the deferred warp rendered on DEVICE, per image, over
                                     drawn matrices, channel counts and output sizes
  synthetic DEVICE KERNELS           Ultralytics' RandomHSV + Format against the device tail, per image,
                                     on random and extreme images with the gains RandomHSV drew
  gains N                            N draws: ours equal Ultralytics' draw for draw, same RNG use, and
                                     their distribution is uniform(-gain, gain) (Kolmogorov-Smirnov)
  tail DEVICE BATCH IMGSZ            the device tail's time per batch (synchronised), ms: colour and
                                     layout alone, and with the geometry (mosaic of 640x360 frames)
  spawn DATA                         the train dataset as `rig train` builds it (every wrapper), its first
                                     batch loaded by a worker started by spawn (which unpickles each class
                                     by its name) and by a forked one: the same keys, the same batch
Each prints one `PROBE {json}` line per measure.
"""

from __future__ import annotations

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
from rig.yolo import augment, draws
from rig.yolo.augment import colour
from rig.yolo.augment import deferred as deferred_steps
from rig.yolo.augment import device as augment_device
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
        "over1": int((d > 1).sum()),
        "max": int(d.max()),
        "exact": float((d == 0).float().mean()),
    }


def summed(stats: list[dict[str, Any]]) -> dict[str, Any]:
    px = sum(s["pixels"] for s in stats)
    return {
        "pixels": px,
        "within1": sum(s["within1"] * s["pixels"] for s in stats) / px,
        "exact": sum(s["exact"] * s["pixels"] for s in stats) / px,
        "over1": sum(s["over1"] for s in stats),
        "max": max(s["max"] for s in stats),
    }


def overrides(hyp: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, hyp.split(",")):
        key, value = item.split("=", 1)
        out[key] = {"True": True, "False": False}.get(value, value)
        if isinstance(out[key], str) and key != "task":
            out[key] = float(value)
    return out


def dataset(data: dict[str, Any], cache: str, ours: bool, hyp: dict[str, Any]) -> Any:
    rect = bool(hyp.pop("rect", False))
    over = {"imgsz": IMGSZ, "batch": BATCH, "cache": False if cache == "none" else cache, **hyp}
    cfg = get_cfg(overrides=over)
    init_seeds(0)
    # As `rig train` builds it, less the seeded draws (init_seeds above) and the file screen; stock:
    # the node image cache alone (cache=ram), RIG_DEVICE_AUGMENT=0.
    switch = {} if ours else {augment.dataset.SWITCH: "0"}
    with augment.building(cfg, "train", exact=False, guards=False, environ=switch, announce=ours):
        return build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", rect=rect, stride=32)


def first_batches(ds: Any, workers: int, n: int = 3) -> list[dict[str, Any]]:
    init_seeds(0)
    loader = build_dataloader(ds, BATCH, workers, shuffle=not ds.rect, rank=-1, device="cpu")
    it = iter(loader)
    out = [next(it) for _ in range(n)]
    loader.close()
    return out


LABELS = ("cls", "bboxes", "batch_idx", "masks", "sem_masks", "keypoints")


def names(transforms: Any) -> list[str]:
    out = []
    for t in transforms.transforms:
        inner = getattr(t, "transforms", None)
        out.append([type(x).__name__ for x in inner] if inner is not None else type(t).__name__)
    return out


def batches(
    data_yaml: str, device: str, cache: str, workers: str, kernels: str = "auto", hyp: str = ""
) -> None:
    data = check_det_dataset(data_yaml)
    stock_ds = dataset(data, cache, False, overrides(hyp))
    ours_ds = dataset(data, cache, True, overrides(hyp))
    stock, ours = first_batches(stock_ds, int(workers)), first_batches(ours_ds, int(workers))
    labels_equal, stats = True, []
    keys = [k for k in LABELS if k in stock[0]]
    for a, b in zip(stock, ours, strict=True):
        labels_equal &= all(torch.equal(a[k], b[k]) for k in keys)
        labels_equal &= a["im_file"] == b["im_file"]
        handed = {
            k: list(v.shape) for k, v in b.items() if k in augment_device.HANDED_OVER and hasattr(v, "shape")
        }
        finished = augment_device.finish(b, torch.device(device), None if kernels == "auto" else kernels)
        stats.append(compare(a["img"], finished["img"].cpu()))
    report(
        mode="batches",
        device=device,
        kernels=kernels,
        cache=cache,
        workers=int(workers),
        hyp=hyp,
        cls=type(ours_ds).__name__,
        labels_equal=labels_equal,
        labels_compared=keys,
        shape=list(stock[0]["img"].shape),
        handed_over=handed,
        stock_transforms=names(stock_ds.transforms),
        ours_transforms=names(ours_ds.transforms),
        **summed(stats),
    )


def segments(data_yaml: str, root: str) -> None:
    """A segmentation copy of a detection dataset: the same images, each box an octagon inside it."""
    import shutil
    from pathlib import Path

    src = Path(check_det_dataset(data_yaml)["path"])
    dst = Path(root)
    for split in ("train", "val"):
        shutil.copytree(src / "images" / split, dst / "images" / split)  # Ultralytics resolves links
        (dst / "labels" / split).mkdir(parents=True)
        for label in (src / "labels" / split).glob("*.txt"):
            lines = []
            for row in label.read_text().split("\n"):
                if not row.strip():
                    continue
                c, x, y, w, h = row.split()[:5]
                cx, cy, hw, hh = float(x), float(y), float(w) / 2, float(h) / 2
                ring = [
                    (1.0, 0.4),
                    (0.4, 1.0),
                    (-0.4, 1.0),
                    (-1.0, 0.4),
                    (-1.0, -0.4),
                    (-0.4, -1.0),
                    (0.4, -1.0),
                    (1.0, -0.4),
                ]
                lines.append(" ".join([c, *(f"{cx + a * hw:.6f} {cy + b * hh:.6f}" for a, b in ring)]))
            (dst / "labels" / split / label.name).write_text("\n".join(lines) + "\n")
    names = check_det_dataset(data_yaml)["names"]
    (dst / "data.yaml").write_text(
        json.dumps({"path": str(dst), "train": "images/train", "val": "images/val", "names": names})
    )
    report(mode="segments", path=str(dst / "data.yaml"))


def _tiles(rng: np.random.Generator, channels: int) -> list[np.ndarray]:
    """Loaded images as Mosaic meets them: noise, a smooth gradient, flat areas, sharp edges."""
    out = []
    for k in range(4):
        h, w = int(rng.integers(40, 200)), int(rng.integers(40, 200))
        if k % 2:
            xx = np.mgrid[0:h, 0:w][1]
            img = np.stack([(xx * 255 // w + c * 40) % 256 for c in range(channels)], -1).astype(np.uint8)
            img[h // 3 : h // 2] = 255
        else:
            img = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        out.append(img)
    return out


WARP_CASES = (  # RandomPerspective's settings, the output size (w, h), channels, mosaic or one image
    ({"translate": 0.1, "scale": 0.5}, (160, 160), 3, True),  # the defaults
    ({"degrees": 30.0, "translate": 0.2, "scale": 0.9, "shear": 10.0}, (160, 160), 3, True),
    ({"degrees": 10.0, "scale": 0.5, "perspective": 0.001}, (160, 160), 3, True),
    ({"translate": 0.1, "scale": 0.5}, (160, 96), 3, False),  # letterbox: one image, a rect batch's shape
    ({"degrees": 180.0, "scale": 0.5, "shear": 30.0}, (128, 160), 1, False),
    ({"translate": 0.1, "scale": 0.5, "perspective": 0.0005}, (160, 160), 4, True),
    ({"translate": 0.1, "scale": (0.2, 3.0)}, (96, 96), 3, True),  # scale as a (min, max) pair
)


def warp(device: str, kernels: str = "auto", repeats: str = "8") -> None:
    from rig.yolo.augment import warp, warp_job
    from ultralytics.data.augment import RandomPerspective

    rng = np.random.default_rng(0)
    deferred = deferred_steps.classes()["DeferredPerspective"]
    stats, cases, sampled = [], [], []
    for settings, size, channels, mosaic in WARP_CASES:
        case_stats = []
        for r in range(int(repeats)):
            tiles = _tiles(rng, channels)
            s = size[0]
            canvas_w, canvas_h = (2 * s, 2 * s) if mosaic else (tiles[0].shape[1], tiles[0].shape[0])
            canvas = np.full((canvas_h, canvas_w, channels), 114, np.uint8)
            if mosaic:  # Mosaic's four quadrants around a centre, cut to the canvas: they never overlap
                xc, yc = int(rng.integers(s // 2, 3 * s // 2)), int(rng.integers(s // 2, 3 * s // 2))
                parts = quadrants(tiles, xc, yc, 2 * s)
            else:
                parts = [warp_job.Tile(tiles[0], 0, 0)]
            for part in parts:
                h, w = part.pixels.shape[:2]
                canvas[part.y : part.y + h, part.x : part.x + w] = part.pixels
            step = RandomPerspective(**settings, size=size)
            random.seed(1000 * len(cases) + r)
            params = step.get_params({"img": canvas})
            stock = step.apply_image({"img": canvas}, params)["img"]
            job = warp_job.WarpJob(parts, canvas_w, canvas_h, channels) if mosaic else canvas
            labels = deferred.apply_image(step_as(step, deferred), {"img": job}, params)
            packed = warp_job.pack([labels["img"]])
            choice = None if kernels == "auto" else kernels
            ours = warp.render(packed["img"], packed[warp_job.GEOM], packed[warp_job.TILES], device, choice)
            expected = torch.from_numpy(stock.reshape(ours.shape[1:]))
            case_stats.append(compare(expected, ours[0].cpu()))
            if not settings.get("perspective"):
                sampled.append(compare(expected, grid_sampled(canvas, labels["img"].inverse, size)))
        stats += case_stats
        cases.append(
            {
                "settings": str(settings),
                "size": size,
                "channels": channels,
                "mosaic": mosaic,
                **summed(case_stats),
            }
        )
    report(
        mode="warp",
        device=device,
        kernels=kernels,
        images=len(stats),
        cases=cases,
        grid_sample=summed(sampled),  # the usual float warp, for comparison: not OpenCV's pixels
        **summed(stats),
    )


def grid_sampled(canvas: np.ndarray, inverse: np.ndarray, size: tuple[int, int]) -> Any:
    """torch's affine_grid/grid_sample on the same canvas and matrix: float bilinear, exact positions."""
    import torch.nn.functional as F

    h, w = canvas.shape[:2]
    theta = torch.tensor(inverse[:2], dtype=torch.float64)  # pixel centres -> [-1, 1], as align_corners=False
    to_unit = torch.tensor([[2 / w, 0, 1 / w - 1], [0, 2 / h, 1 / h - 1], [0, 0, 1]], dtype=torch.float64)
    from_unit = torch.tensor(
        [[size[0] / 2, 0, size[0] / 2 - 0.5], [0, size[1] / 2, size[1] / 2 - 0.5], [0, 0, 1]]
    )
    theta = (to_unit @ torch.cat([theta, torch.tensor([[0.0, 0.0, 1.0]])]) @ from_unit.double())[:2]
    grid = F.affine_grid(theta[None].float(), [1, 1, size[1], size[0]], align_corners=False)
    src = torch.from_numpy(canvas).permute(2, 0, 1)[None].float() - 114  # zeros padding: border 114
    out = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False) + 114
    return out[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8)


def quadrants(frames: list[np.ndarray], xc: int, yc: int, size: int) -> list[Any]:
    """Four images placed as Mosaic places them (top left, top right, bottom left, bottom right of
    the centre), cut to a size x size canvas, as warp_job.Tiles."""
    from rig.yolo.augment import warp_job

    tiles = []
    for k, f in enumerate(frames):
        h, w = f.shape[:2]
        x, y = (xc - w if k in (0, 2) else xc), (yc - h if k in (0, 1) else yc)
        x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, size), min(y + h, size)
        if x1 > x0 and y1 > y0:
            tiles.append(warp_job.Tile(f[y0 - y : y1 - y, x0 - x : x1 - x], x0, y0))
    return tiles


def step_as(step: Any, cls: Any) -> Any:
    import copy

    new = copy.copy(step)
    new.__class__ = cls
    return new


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
    made = deferred_steps.classes()
    deferred_hsv, deferred_format = made["DeferredHSV"], made["DeferredFormat"]
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
                rows = labels[augment_device.KEY][None]
                ours = colour.tail(raw, rows, None if kernels == "auto" else kernels)[0].cpu()
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
    deferred_hsv = deferred_steps.classes()["DeferredHSV"]
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


def _mosaic_batch(b: int, s: int, rng: np.random.Generator) -> dict[str, Any]:
    """A packed batch as the workers hand it over: b 2x2 mosaics of frames (s x s*9/16) at imgsz s,
    warped with Ultralytics' default draws."""
    from rig.yolo.augment import warp_job
    from ultralytics.data.augment import RandomPerspective

    step = RandomPerspective(translate=0.1, scale=0.5, size=(s, s))
    deferred = step_as(step, deferred_steps.classes()["DeferredPerspective"])
    jobs = []
    for _ in range(b):
        frames = [rng.integers(0, 256, (s * 9 // 16, s, 3), dtype=np.uint8) for _ in range(4)]
        xc, yc = int(rng.integers(s // 2, 3 * s // 2)), int(rng.integers(s // 2, 3 * s // 2))
        tiles = quadrants(frames, xc, yc, 2 * s)
        job = warp_job.WarpJob(tiles, 2 * s, 2 * s, 3)
        params = step.get_params({"img": job})
        jobs.append(deferred.apply_image({"img": job}, params)["img"])
    return warp_job.pack(jobs)


def tail(device: str, batch: str, imgsz: str) -> None:
    dev = torch.device(device)
    b, s = int(batch), int(imgsz)
    rows = torch.tensor(
        [[1.0, 0.01, 0.5, -0.3, 1.0, float(i % 2), 0.0] for i in range(b)], dtype=torch.float64
    )
    colour = {"img": torch.randint(0, 256, (b, s, s, 3), dtype=torch.uint8)}
    geometry = _mosaic_batch(b, s, np.random.default_rng(0))
    for name, handed in (("colour", colour), ("geometry", geometry)):
        if dev.type == "cuda":
            handed["img"] = handed["img"].pin_memory()
        times = []
        for i in range(23):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            out = augment_device.finish({**handed, augment_device.KEY: rows}, dev)["img"].float() / 255
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if i >= 3:
                times.append(time.perf_counter() - t0)
        ms = 1000 * float(np.median(times))
        report(
            mode="tail",
            moved=name,  # colour and layout alone, or with the mosaic and the warp
            device=device,
            batch=b,
            imgsz=s,
            handed_over_bytes=int(handed["img"].numel()),
            ms_per_batch=ms,
            ms_per_image=ms / b,
            shape=list(out.shape),
            peak_gib=torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None,
        )


def spawn(data_yaml: str) -> None:
    data = check_det_dataset(data_yaml)
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "batch": BATCH, "cache": "ram"})
    with augment.building(cfg, "train", exact=True, guards=None, environ={}, announce=False):
        ds = build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", stride=32)
    keys = [draws.Key(seed=0, epoch=1, image=i) for i in range(BATCH)]  # as the train sampler yields them
    got = {}
    for context in ("spawn", "fork"):
        collate = type(ds).collate_fn
        loader = torch.utils.data.DataLoader(
            ds, BATCH, sampler=keys, num_workers=1, multiprocessing_context=context, collate_fn=collate
        )
        got[context] = next(iter(loader))
        del loader
    spawned, forked = got["spawn"], got["fork"]
    made = [c for c in type(ds).__mro__ if c.__name__.endswith("YOLODataset")]
    report(
        mode="spawn",
        classes=[f"{c.__module__}.{c.__qualname__}" for c in made],
        transforms=names(ds.transforms),
        keys_equal=sorted(spawned) == sorted(forked),
        values_equal=all(_same(spawned[k], forked[k]) for k in forked),
        handed_over=sorted(k for k in forked if k in augment_device.HANDED_OVER),
    )


def _same(a: Any, b: Any) -> bool:
    """Equal tensors or arrays, lists and tuples of equal items, or equal values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(b) is type(a) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


if __name__ == "__main__":
    log.setup()
    command, args = sys.argv[1], sys.argv[2:]
    {
        "batches": batches,
        "segments": segments,
        "warp": warp,
        "synthetic": synthetic,
        "gains": gains,
        "tail": tail,
        "spawn": spawn,
    }[command](*args)
