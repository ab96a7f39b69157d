"""`rig bench`: where training time goes on this machine (rig.observe.bench), as a table and JSON."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rig import log
from rig.launch import steplevers
from rig.observe.bench import BenchOptions, compile_blocker, format_table, run_bench
from rig.observe.bench.results import MEASURED, PARTS
from rig.observe.bench.step import OPTIMIZERS
from rig.yolo import contract, ultra, ultracheck

_logger = log.get("bench")


def _with_stdout_on_stderr(fn: Any, *args: Any) -> Any:
    """Run fn with file descriptor 1 pointing at stderr: Ultralytics' progress bars print to stdout,
    and so may loader workers and native code, which a Python-level redirect would miss."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        return fn(*args)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_bench(args: argparse.Namespace) -> int:
    ultracheck.check_at_start("rig bench", needs=contract.BENCH)  # before any data is read
    opts = BenchOptions(
        data=args.data,
        model=args.model,
        imgsz=args.imgsz,
        batch=args.batch,
        workers=args.workers,
        amp=args.amp,
        compile=args.compile,
        quick=args.quick,
        device=args.device,
        train_images=args.train_images,
        source_size=args.source_size,
        deterministic=args.deterministic,
        ranks=args.ranks,
        levers=tuple(args.levers),
        equal_steps=args.equal_steps,
        parts=tuple(args.parts),
        record=args.record,
        optimizer=args.optimizer,
    )
    if opts.compile and (note := compile_blocker()):
        _logger.warning("compile: %s", note)
    if args.json == "-":  # JSON alone on stdout for `make bench > bench.json`, everything else on stderr
        res = _with_stdout_on_stderr(run_bench, opts)
        print(format_table(res), file=sys.stderr)
        sys.stdout.write(res.to_json())
        return 0
    res = run_bench(opts)
    text = res.to_json()
    print(format_table(res))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
        _logger.info("wrote %s", args.json)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return value


def _levers(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names or any(n not in MEASURED for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: give some of {','.join(MEASURED)}")
    return names


def _optimizer(text: str) -> str:
    found = {name.lower(): name for name in OPTIMIZERS}.get(text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give one of Ultralytics' {','.join(OPTIMIZERS)}")
    return found


def _parts(text: str) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"{text!r}: give some of {','.join(PARTS)}")
    return parts


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give WIDTHxHEIGHT, e.g. 1280x720") from None
    return w, h


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure loader, train step and a short run; name the bottleneck")
    p.add_argument(
        "--quick", action="store_true", help="fewer rounds and steps (a CPU run in under 2 minutes)"
    )
    p.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout, table on stderr)"
    )
    p.add_argument("--data", metavar="YAML", help="your data yaml (default: generated shapes)")
    p.add_argument(
        "--model", default="yolo11n.yaml", help="model yaml (random weights; default yolo11n.yaml)"
    )
    p.add_argument("--imgsz", type=int, default=ultra.DEFAULT_IMGSZ, help="image size (default %(default)s)")
    p.add_argument(
        "--batch",
        type=_positive,
        help="per-GPU batch (default: what rig train picks, from the GPU's memory; 16 on the CPU)",
    )
    p.add_argument("--workers", type=int, help="loader workers for ours (default: decided from the CPUs)")
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True, help="mixed precision (GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model for the step measure")
    p.add_argument(
        "--levers",
        type=_levers,
        default=list(MEASURED),
        metavar="LIST",
        help="the step with each of these levers against eager, comma-separated (default all: "
        f"{','.join(MEASURED)}; rig train follows what it measures of {','.join(steplevers.LEVERS)}; "
        "bf16 is Ultralytics' amp=bf16 against fp16, yours to give)",
    )
    p.add_argument(
        "--optimizer",
        type=_optimizer,
        help="the step's optimizer, one of Ultralytics' (default: the model's recipe, MuSGD for YOLO26 "
        "and SGD otherwise); the real runs train with it too",
    )
    p.add_argument("--no-levers", dest="levers", action="store_const", const=[], help="the eager step alone")
    p.add_argument(
        "--equal-steps",
        type=_positive,
        metavar="N",
        help="steps whose losses each lever must match within AMP's noise (default 50 on a GPU; on the "
        "CPU the timed steps)",
    )
    p.add_argument(
        "--parts",
        type=_parts,
        default=list(PARTS),
        metavar="LIST",
        help=f"what to measure, comma-separated (default all: {','.join(PARTS)}; run and stock need a GPU)",
    )
    p.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="record the levers' measurement in the cache volume, where rig train reads it (default: on)",
    )
    p.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deterministic algorithms for the step measure (default: the baked default)",
    )
    p.add_argument("--device", help="cpu, or a CUDA device such as cuda:0 (default: first GPU, else cpu)")
    p.add_argument(
        "--train-images", type=int, default=512, help="size of the generated dataset (default 512)"
    )
    p.add_argument(
        "--source-size",
        type=_size,
        default=(1280, 720),
        metavar="WxH",
        help="pixel size of the generated images (default 1280x720, camera frames)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="compare cache=ram with N ranks at once, Ultralytics' copy per rank against the node image "
        "cache (default: the ranks rig train would start, 2 on a CPU; not with --quick; 0: skip)",
    )
    p.set_defaults(func=cmd_bench)
