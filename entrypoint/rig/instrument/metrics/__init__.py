"""Prometheus `/metrics` for `rig train`: training progress from every rank, GPU gauges from NVML.

One process per node serves (the torchrun launcher, or the trainer when it runs alone on the CPU);
every rank of the node publishes through prometheus-client's multiprocess mode: a directory of
memory-mapped files that the serving process creates, names in PROMETHEUS_MULTIPROC_DIR for the
ranks, reads at each scrape and removes at the end.

- config: the environment contract (RIG_METRICS_ADDR, RIG_METRICS_PORT, who serves).
- node: the node's HTTP server and its directory.
- gpus: NVML read at each scrape, named as dcgm-exporter names it (and GPM activity as rig_gpu_*).
- training: the Ultralytics callbacks each rank publishes through.
"""

from rig.instrument.metrics.node import NodeServer, serve_node
from rig.instrument.metrics.training import attach

__all__ = ["NodeServer", "attach", "serve_node"]
