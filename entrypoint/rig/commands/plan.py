"""`rig plan`: print the GPU/CPU/memory binding plan for each local rank."""

from __future__ import annotations

import argparse
from typing import Any

from rig import log
from rig.commands.options import add_topology_options, topology
from rig.hardware import choice
from rig.launch import binding, job
from rig.yolo import ultracheck

_logger = log.get("launch")


def cmd_plan(args: argparse.Namespace) -> int:
    ultracheck.check_at_start("rig plan")  # what the plan's training would run with
    topo = topology(args)
    if not topo.gpus and args.gpus is None:
        _logger.info("no GPU visible: showing the CPU-only plan for one process")
        ranks = list(binding.make_plan(topo, 1).ranks)
    else:
        ranks = job.make_plan(topo, choice.select_gpus(choice.parse_gpus(args.gpus), topo))
    print(binding.to_json(ranks) if args.json else binding.table(ranks))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="print the GPU/CPU/memory binding plan for each local rank")
    add_topology_options(p)
    p.add_argument("--json", action="store_true", help="one JSON object per local rank")
    p.set_defaults(func=cmd_plan)
