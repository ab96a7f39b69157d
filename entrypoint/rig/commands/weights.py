"""`rig weights get NAME[@sha256:HEX]...`: pretrained weights into the `weights` volume, on request.

Training never downloads (YOLO_OFFLINE); this is the explicit step that does (rig.yolo.assets).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rig import log
from rig.errors import RigError
from rig.yolo import assets
from rig.yolo.ultra import settings_dirs

_logger = log.get("weights")


def get_weights(names: list[str], weights_dir: Path, base: str | None, force: bool = False) -> list[Path]:
    requests = [assets.parse_request(n) for n in names]  # every name checked before any download
    if not weights_dir.is_dir():
        raise RigError(f"{weights_dir} does not exist; mount the `weights` volume or a host folder there")
    done = []
    for request in requests:
        dest = weights_dir / request.name
        if dest.exists() and not force:
            _logger.info("%s is already there (--force fetches it again)", dest)
            done.append(dest)
            continue
        url = assets.weights_url(request.name, base)
        try:
            done.append(assets.fetch(url, dest, request.sha256))
        except assets.Unreachable as e:
            raise RigError(
                f"{e}: offline, copy {request.name} (from {url}) into {weights_dir} "
                f"(`docker compose cp {request.name} workstation:{weights_dir}/`, or WEIGHTS_DIR=host/folder)"
            ) from None
    return done


def cmd_weights_get(args: argparse.Namespace) -> int:
    weights_dir = Path(args.dir) if args.dir else settings_dirs()["weights_dir"]
    for path in get_weights(args.names, weights_dir, assets.assets_base(), force=args.force):
        print(path)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("weights", help="fetch pretrained weights into /weights (the one step that downloads)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    get = verbs.add_parser(
        "get", help=f"download Ultralytics' release assets (or from ${assets.ASSETS_URL_VAR}), checked"
    )
    get.add_argument("names", nargs="+", metavar="NAME", help="e.g. yolo11n.pt or yolo11n.pt@sha256:HEX")
    get.add_argument("--dir", help="where to put them (default: Ultralytics' weights_dir, /weights)")
    get.add_argument("--force", action="store_true", help="download again even when the file is there")
    get.set_defaults(func=cmd_weights_get)
