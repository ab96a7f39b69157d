"""Where a train image's loader time goes: `ds[i]` with and without the RAM cache, its top
functions under cProfile, and JPEG decode + resize cost by source size (BENCHMARKS.md).

Runs inside the image, one process, no workers:
    docker run --rm --network none -v "$PWD/tools:/tools:ro" yolo-rig:cu121 python /tools/profile_loader.py
"""

import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import yaml
from rig.yolo.demo_data import make_demo_dataset
from ultralytics.cfg import get_cfg
from ultralytics.data import build_yolo_dataset

IMGSZ, BATCH, WARMUP, SAMPLES = 640, 16, 20, 200


def dataset(data_yaml: Path, cache: object) -> object:
    data = yaml.safe_load(data_yaml.read_text())
    data["train"] = str(Path(data["path"]) / data["train"])
    cfg = get_cfg(overrides={"imgsz": IMGSZ, "batch": BATCH, "cache": cache})
    return build_yolo_dataset(cfg, data["train"], BATCH, data, mode="train", stride=32)


def per_image_ms(ds: object) -> float:
    n = len(ds)  # type: ignore[arg-type]
    for i in range(WARMUP):
        ds[i % n]  # type: ignore[index]
    t0 = time.perf_counter()
    for i in range(SAMPLES):
        ds[i % n]  # type: ignore[index]
    return (time.perf_counter() - t0) / SAMPLES * 1000


def main() -> None:
    root = Path(tempfile.mkdtemp())
    data_yaml = make_demo_dataset(root / "d640", train=64, val=8, imgsz=640)
    for cache in (False, "ram"):
        print(f"ds[i], 640 px source, cache={cache}: {per_image_ms(dataset(data_yaml, cache)):.1f} ms/image")

    ds = dataset(data_yaml, "ram")
    profile = cProfile.Profile()
    profile.runcall(per_image_ms, ds)
    print(f"\ntop functions per image, cache=ram ({SAMPLES} samples):")
    stats = pstats.Stats(profile).sort_stats("tottime")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]  # type: ignore[attr-defined]
    for (file, _, name), (_, _, tottime, _, _) in rows:
        print(f"  {tottime / SAMPLES * 1000:5.2f} ms  {name} ({Path(file).name})")

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
