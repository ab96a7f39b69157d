"""`rig train key=value...`: Ultralytics on N GPUs through torchrun, NUMA binding and tuned arguments.

Everything is decided before anything runs (rig.launch.trainplan), so bad input stops with one line
and `--dry-run` prints the exact command; then a single exec, so torchrun's exit code is ours.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

from rig import log
from rig.commands.options import add_topology_options, topology
from rig.launch import hangup, job, trainplan
from rig.yolo import hostdata, ultracheck


def cmd_train(args: argparse.Namespace) -> int:
    ultracheck.check_at_start("rig train")  # the Ultralytics the ranks will import, before any data is read
    launch = trainplan.plan_train(
        hostdata.resolve_args(args.args),
        gpus=args.gpus,
        cpu_ranks_given=args.cpu_ranks,
        read_topology=lambda: topology(args),
        dry_run=args.dry_run,
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
        help="with device=cpu: N ranks per node (gloo) on shares of its CPUs "
        f"(env {trainplan.CPU_RANKS_ENV})",
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact command and stop")
    p.add_argument("args", nargs="*", metavar="key=value", help="Ultralytics train arguments")
    p.set_defaults(func=cmd_train, intermixed="args")
