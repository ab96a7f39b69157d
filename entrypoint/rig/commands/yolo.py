"""`rig yolo ARGS`: the Ultralytics `yolo` CLI, after checking that model= and data= are on disk.

Offline, Ultralytics answers a missing weight or dataset with a download traceback; rig answers
with one line naming where to put it (rig.yolo.offline). A moved dataset's yaml is handed over as
a copy with its root (rig.yolo.hostdata). `yolo train` resuming a checkpoint gets a private copy of
it, checked as `rig train` checks one (rig.launch.resumecopy), removed once `yolo` has ended.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.launch import resumecopy
from rig.yolo import hostdata, ultra
from rig.yolo.offline import check_args

_logger = log.get("yolo")


def cmd_yolo(args: argparse.Namespace) -> int:
    argv = hostdata.resolve_args(args.args)
    check_args(argv)
    argv, private = resumecopy.for_yolo(argv, Path(ultra.settings_dirs()["weights_dir"]))
    if private is not None:
        resumecopy.remove_after(private.folder)
    _logger.info("Executing: yolo %s", " ".join(argv))
    try:
        os.execvp("yolo", ["yolo", *argv])
    except FileNotFoundError:
        raise RigError("the `yolo` command is not installed in this environment", 127) from None
    return 0  # not reached


def register(sub: Any) -> None:
    p = sub.add_parser(
        "yolo", help="run the Ultralytics `yolo` CLI, first checking that model= and data= are on disk"
    )
    p.add_argument("args", nargs=argparse.REMAINDER, help="the yolo arguments, e.g. predict model=yolo11n.pt")
    p.set_defaults(func=cmd_yolo)
