#!/usr/bin/env python3
"""Start-up time of `rig`'s light commands against a bare Python, in the image. Runs inside the
container (stdlib only); the commands alternate within each round, so a busy host slows them alike.

    make bench-cli
    docker run --rm -i --entrypoint /opt/venv/bin/python yolo-rig:cu121 - --runs 20 < tools/measure_cli.py

Prints the median and the spread of each command and its ratio to `python -c pass`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PYTHON = sys.executable
_CHECK = "from rig.yolo import ultracheck; ultracheck.check_at_start('rig train')"
_UNBAKED = "from pathlib import Path; from rig.yolo import contractcheck; contractcheck.BAKED = Path('/none')"
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "rig --version": ["rig", "--version"],
    "rig --help": ["rig", "--help"],
    # What the compose healthcheck runs (as nobody there); without `rig serve` it says so and exits 1.
    "python -I -m rig health": [PYTHON, "-I", "-m", "rig", "health"],
    # What `rig train`, `rig bench` and `rig plan` add to their start: the check of Ultralytics
    # against rig's contract (rig/yolo/ultracheck.py), its modules imported; the image's own
    # Ultralytics (the report baked at build time), and another one (its source read).
    "Ultralytics check (image's)": [PYTHON, "-I", "-c", _CHECK],
    "Ultralytics check (other)": [PYTHON, "-I", "-c", f"{_UNBAKED}; {_CHECK}"],
}


def once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # one warm-up each: the page cache, not the first run, is measured
        once(argv)
    for _ in range(args.runs):
        for name, argv in COMMANDS.items():
            times[name].append(once(argv))
    base = statistics.median(times["python -c pass"])
    load = os.getloadavg()[0]
    print(f"{args.runs} runs each, interleaved; load average {load:.1f}; {os.cpu_count()} CPUs")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"{name:<26} median {median * 1000:6.1f} ms  (min {min(samples) * 1000:6.1f}, "
            f"max {max(samples) * 1000:6.1f})  {median / base:4.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
