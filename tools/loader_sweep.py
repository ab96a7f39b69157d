"""Loader-only sweep behind BENCHMARKS.md: stock (cache off) and cache=ram at 1..3 workers.

Run inside the image, on `rig bench`'s generated data (same options as `rig bench`):
    docker compose -f compose.yaml -f compose.cpu.yaml run --rm --no-deps -T \
        -v "$PWD/tools:/tools:ro" workstation python /tools/loader_sweep.py
Configurations alternate order each round so drift hits all of them; medians are printed.
"""

import os
import statistics

os.environ.setdefault("YOLO_VERBOSE", "False")

from rig.observe.bench import BenchOptions
from rig.observe.bench.loader import bench_data, dataset, loader_img_s
from ultralytics.data.utils import check_det_dataset

CONFIGS = [("off", False, 2), ("ram", "ram", 1), ("ram", "ram", 2), ("ram", "ram", 3)]


def main(rounds: int = 3, batches: int = 40) -> None:
    opts = BenchOptions()
    batch = 16
    data = check_det_dataset(str(bench_data(opts)))
    datasets = {"off": dataset(data, opts, False, batch)[0], "ram": dataset(data, opts, "ram", batch)[0]}
    rates: dict[tuple[str, int], list[float]] = {(name, w): [] for name, _, w in CONFIGS}
    for r in range(rounds):
        for name, _, workers in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
            rates[(name, workers)].append(loader_img_s(datasets[name], batch, workers, batches, "cpu"))
    for (name, workers), values in rates.items():
        rounded = [round(v, 1) for v in values]
        median = statistics.median(values)
        print(f"cache={name} workers={workers}: median {median:.1f} img/s, rounds {rounded}")


if __name__ == "__main__":
    main()
