"""`rig launch -- COMMAND`: your own per-rank program through torchrun and the binder."""

from __future__ import annotations

import argparse
from typing import Any

from rig.commands.options import add_topology_options, topology
from rig.errors import RigError
from rig.launch import job


def cmd_launch(args: argparse.Namespace) -> int:
    program = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not program:
        raise RigError("rig launch: no command given; usage: rig launch [--gpus N] -- COMMAND [ARG...]")
    launch = job.plan_launch(program, topology(args), args.gpus)
    if args.dry_run:
        print(launch.shell())
        return 0
    return job.execute(launch)


def register(sub: Any) -> None:
    p = sub.add_parser("launch", help="run your own per-rank program through torchrun and the binder")
    add_topology_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the exact command and stop")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    p.set_defaults(func=cmd_launch)
