"""`rig train key=value...`: Ultralytics on N GPUs through torchrun, NUMA binding and tuned arguments.

Everything is decided before anything runs (rig.launch.job), so bad input stops with one line and
`--dry-run` prints the exact command; then a single exec, so torchrun's exit code is ours.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from rig import log
from rig.commands.options import add_topology_options, topology
from rig.launch import hangup, job
from rig.yolo import hostdata


def cmd_train(args: argparse.Namespace) -> int:
    launch = job.plan_train(
        hostdata.resolve_args(args.args),
        gpus=args.gpus,
        ranks=job.cpu_ranks(args.cpu_ranks, os.environ),
        discover=lambda: topology(args),
        check_dataset=not args.dry_run,
    )
    if launch.done:
        log.get("train").info("%s", launch.done)
        return 0
    if args.dry_run:
        print(launch.shell())
        return 0
    if hangup.at_risk(os.environ, hangup.has_terminal(), signal.getsignal(signal.SIGHUP) == signal.SIG_IGN):
        log.get("train").info("%s", hangup.HINT)
    return job.execute(launch)


def register(sub: Any) -> None:
    p = sub.add_parser("train", help="train with Ultralytics on N GPUs: torchrun, NUMA binding, tuned args")
    add_topology_options(p)
    p.add_argument(
        "--cpu-ranks",
        metavar="N",
        help=f"with device=cpu: N ranks per node (gloo) on shares of its CPUs (env {job.CPU_RANKS_ENV})",
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact command and stop")
    p.add_argument("args", nargs="*", metavar="key=value", help="Ultralytics train arguments")
    p.set_defaults(func=cmd_train, intermixed="args")
