"""`rig export WEIGHTS`: ONNX export with simplification, checked against PyTorch (rig.yolo.export)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rig.errors import RigError
from rig.yolo.export import DEFAULT_RTOL, DEMO_IMAGES, FORMATS, export_onnx


def cmd_export(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise RigError(
            f"only {', '.join(FORMATS)} is exported and checked here", option="--format", value=args.format
        )
    if args.rtol <= 0:
        raise RigError("must be positive", option="--rtol", value=args.rtol)
    if args.max_images < 1:
        raise RigError("must be at least 1", option="--max-images", value=args.max_images)
    result = export_onnx(
        args.weights,
        imgsz=args.imgsz,
        images=args.images,
        max_images=args.max_images,
        rtol=args.rtol,
        opset=args.opset,
    )
    print(result.path)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="export weights to ONNX (simplified) and check it against PyTorch with onnxruntime",
    )
    p.add_argument("weights", type=Path, help="the trained .pt file, e.g. runs/detect/train/weights/best.pt")
    p.add_argument("--format", default="onnx", help="export format (only onnx)")
    p.add_argument("--imgsz", type=int, default=None, help="input size (default: the size it was trained at)")
    p.add_argument(
        "--images",
        type=Path,
        action="append",
        default=[],
        help=f"sample image or folder for the check, repeatable (default: {DEMO_IMAGES}, else bundled)",
    )
    p.add_argument("--max-images", type=int, default=8, help="sample images to compare (default 8)")
    p.add_argument(
        "--rtol",
        type=float,
        default=DEFAULT_RTOL,
        help=f"bound on |onnx - pytorch| / output scale (default {DEFAULT_RTOL:g})",
    )
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default: Ultralytics' choice)")
    p.set_defaults(func=cmd_export)
