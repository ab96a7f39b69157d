"""Where a train image's loader time goes: `ds[i]` and the collate with and without the RAM cache, and
with the pixel work left to the device (rig.yolo.augment), their top functions under cProfile,
the device tail per image on this CPU, and JPEG decode + resize cost by source size (BENCHMARKS.md).

Runs inside the image, one process, no workers:
    docker run --rm --network none -v "$PWD/tools:/tools:ro" yolo-rig:cu121 python /tools/profile_loader.py
"""

import contextlib
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import torch
from rig.yolo.augment import dataset as augment_dataset
from rig.yolo.augment import device as augment_device
from rig.yolo.demo_data import make_demo_dataset
from ultralytics.cfg import get_cfg
from ultralytics.data import build_yolo_dataset
from ultralytics.data.utils import check_det_dataset

IMGSZ, BATCH, WARMUP, SAMPLES = 640, 16, 32, 208


def dataset(data_yaml: Path, cache: object, deferred: bool = False) -> object:
    data = check_det_dataset(str(data_yaml))  # the yaml as Ultralytics reads it: paths resolved
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "batch": BATCH, "cache": cache})
    hook = augment_dataset.in_use("train", {}, announce=False) if deferred else contextlib.nullcontext()
    with hook:
        return build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", stride=32)


def top_functions(ds: object, title: str) -> None:
    profile = cProfile.Profile()
    profile.runcall(per_image_ms, ds)
    print(f"\ntop functions per image, {title} ({SAMPLES} samples):")
    stats = pstats.Stats(profile).sort_stats("tottime")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]  # type: ignore[attr-defined]
    for (file, _, name), (_, _, tottime, _, _) in rows:
        print(f"  {tottime / SAMPLES * 1000:5.2f} ms  {name} ({Path(file).name})")


def tail_ms(ds: object) -> float:
    """The device tail of one collated batch of ds on this CPU (OpenCV's calls), per image."""
    batch = type(ds).collate_fn([ds[i] for i in range(BATCH)])  # type: ignore[index]
    times = []
    for _ in range(6):
        copy = augment_device.handed_over(batch)
        t0 = time.perf_counter()
        augment_device.finish(copy, torch.device("cpu"))
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) / BATCH * 1000


def per_image_ms(ds: object) -> float:
    """A worker's time per image: `ds[i]`, then the dataset's collate of each batch (where ours
    copies the tiles the device will warp, and Ultralytics' stacks the images)."""
    n = len(ds)  # type: ignore[arg-type]
    collate = type(ds).collate_fn  # type: ignore[attr-defined]

    def images(first: int, count: int) -> None:
        for b in range(first, first + count, BATCH):
            collate([ds[i % n] for i in range(b, b + BATCH)])  # type: ignore[index]

    images(0, WARMUP)
    t0 = time.perf_counter()
    images(WARMUP, SAMPLES)
    return (time.perf_counter() - t0) / SAMPLES * 1000


def main() -> None:
    root = Path(tempfile.mkdtemp())
    data_yaml = make_demo_dataset(root / "d640", train=64, val=8, imgsz=640)
    for cache in (False, "ram"):
        ms = per_image_ms(dataset(data_yaml, cache))
        print(f"ds[i] + collate, 640 px source, cache={cache}: {ms:.1f} ms/image")
    ours = dataset(data_yaml, "ram", deferred=True)
    print(f"ds[i] + collate, 640 px source, cache=ram, device augment: {per_image_ms(ours):.1f} ms/image")
    print(f"  its device tail on this CPU (OpenCV in the training process): {tail_ms(ours):.2f} ms/image")

    top_functions(dataset(data_yaml, "ram"), "cache=ram")
    top_functions(ours, "cache=ram, device augment")

    print("\ndecode and resize, one JPEG:")
    for size in (640, 1280):
        d = make_demo_dataset(root / f"s{size}", train=40, val=1, imgsz=size)
        files = sorted((d.parent / "images" / "train").glob("*.jpg"))
        decode, resize = [], []
        for f in files:
            t0 = time.perf_counter()
            img = cv2.imread(str(f))
            t1 = time.perf_counter()
            cv2.resize(img, (IMGSZ, IMGSZ), interpolation=cv2.INTER_LINEAR)
            decode.append(t1 - t0)
            resize.append(time.perf_counter() - t1)
        kb = statistics.mean(f.stat().st_size for f in files) / 1024
        print(
            f"  {size}x{size} ({kb:.0f} KB): imread {statistics.median(decode) * 1000:.1f} ms, "
            f"resize to {IMGSZ} {statistics.median(resize) * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()
