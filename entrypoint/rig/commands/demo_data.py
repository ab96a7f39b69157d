"""`rig demo-data DIR`: the generated shapes dataset (rig.yolo.demo_data), so training works offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.yolo.demo_data import make_demo_dataset

_logger = log.get("demo-data")


def cmd_demo_data(args: argparse.Namespace) -> int:
    try:
        path = make_demo_dataset(
            Path(args.dir),
            train=args.train,
            val=args.val,
            imgsz=args.imgsz,
            height=args.height,
            seed=args.seed,
            force=args.force,
        )
    except PermissionError as e:
        raise RigError(f"demo-data: cannot write {e.filename}: permission denied") from None
    _logger.info("%d train / %d val images; train with: yolo train data=%s", args.train, args.val, path)
    print(path)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("demo-data", help="generate a small YOLO detection dataset (shapes) in DIR")
    p.add_argument("dir", metavar="DIR", help="where to write it, e.g. /datasets/demo")
    p.add_argument("--train", type=int, default=64, help="train images (default 64)")
    p.add_argument("--val", type=int, default=16, help="val images (default 16)")
    p.add_argument("--imgsz", type=int, default=320, help="image width in pixels (default 320)")
    p.add_argument("--height", type=int, help="image height in pixels (default: square)")
    p.add_argument("--seed", type=int, default=0, help="random seed: same seed, same files (default 0)")
    p.add_argument("--force", action="store_true", help="replace an existing demo dataset in DIR")
    p.set_defaults(func=cmd_demo_data)
