"""`rig bench`: where does training time go on this machine, and what do our defaults buy?

In one run, on the same data and model (rig.observe.bench.measure has the order): the loader, stock
against ours; the device tail, part by part; the train step eager and with each lever; with a GPU,
short real runs of ours and of stock `yolo train`, with the GPU's busy share. It prints a table,
writes JSON and names the bottleneck.
"""

from rig.observe.bench.measure import run_bench
from rig.observe.bench.results import BenchOptions, BenchResult, LoaderResult, TrainResult
from rig.observe.bench.step import compile_blocker
from rig.observe.bench.table import format_table

__all__ = [
    "BenchOptions",
    "BenchResult",
    "LoaderResult",
    "TrainResult",
    "compile_blocker",
    "format_table",
    "run_bench",
]
