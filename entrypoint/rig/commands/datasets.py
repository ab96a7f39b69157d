"""`rig datasets get NAME.yaml[@sha256:HEX]...`: Ultralytics' named datasets into /datasets, on request.

Training never downloads (YOLO_OFFLINE); this is the explicit step that does (rig.yolo.named_datasets).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rig.yolo import assets, named_datasets
from rig.yolo.ultra import settings_dirs


def cmd_datasets_get(args: argparse.Namespace) -> int:
    datasets_dir = Path(args.dir) if args.dir else settings_dirs()["datasets_dir"]
    requests = [assets.parse_request(n) for n in args.names]  # every name checked before any download
    base = assets.assets_base()
    for request in requests:
        print(named_datasets.get(request, datasets_dir, base, force=args.force))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("datasets", help="fetch Ultralytics' named datasets into /datasets (coco8.yaml ...)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    get = verbs.add_parser("get", help="download and unpack the zip named in the dataset yaml's download:")
    get.add_argument("names", nargs="+", metavar="NAME", help="e.g. coco8.yaml or coco128.yaml@sha256:HEX")
    get.add_argument("--dir", help="the datasets folder (default: Ultralytics' datasets_dir, /datasets)")
    get.add_argument("--force", action="store_true", help="download again even when the dataset is there")
    get.set_defaults(func=cmd_datasets_get)
