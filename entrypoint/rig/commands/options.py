"""Options shared by `rig plan`, `rig train` and `rig launch`: which GPUs, on which machine."""

from __future__ import annotations

import argparse
from typing import Any

from rig.hardware.topology import Topology
from rig.launch import job


def add_topology_options(p: Any) -> None:
    p.add_argument("--gpus", default=None, help="a count, 'all' (default) or CUDA ids like 0,2")
    p.add_argument("--sysfs-root", metavar="DIR", help="plan from a copy of another machine's /sys")
    p.add_argument("--gpu-bus-ids", metavar="ID,...", help="the GPUs by PCI bus id (0000:18:00.0), in order")


def topology(args: argparse.Namespace) -> Topology:
    return job.topology(args.sysfs_root, args.gpu_bus_ids)
