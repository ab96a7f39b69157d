"""`rig doctor`: what is wrong with this training box, one check at a time, each with its fix.

Gather (rig.observe.doctor_gather), check (rig.observe.doctor), print; any failure exits 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from rig.observe import doctor, doctor_gather
from rig.yolo import ultra, ultracheck


def cmd_doctor(args: argparse.Namespace) -> int:
    facts = doctor_gather.gather(
        data=args.data,
        bench=args.bench,
        gpus=args.gpus,
        batch=args.batch,
        imgsz=args.imgsz,
        turned_off=ultracheck.turned_off,
    )
    checks = doctor.run_checks(facts)
    print(doctor.render_json(checks) if args.json else doctor.render_text(checks))
    return doctor.exit_code(checks)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check the box for what slows or breaks training; each problem comes with its fix",
        description="Exit 0 when every check passes or warns, 1 when any fails.",
    )
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument(
        "--data", metavar="DATA", help="a data yaml or image directory: readable, read speed, cache=ram"
    )
    p.add_argument(
        "--bench",
        action="store_true",
        help="also measure loader vs model step throughput (`rig bench --quick`; slow, uses the GPU)",
    )
    p.add_argument(
        "--gpus", metavar="N", help="the GPUs training should see, as `rig train --gpus` (N, all, 0,2)"
    )
    p.add_argument(
        "--batch",
        type=int,
        default=ultra.DEFAULT_BATCH,
        help=f"total batch size the shm estimate assumes ({ultra.DEFAULT_BATCH})",
    )
    p.add_argument(
        "--imgsz",
        type=int,
        default=ultra.DEFAULT_IMGSZ,
        help=f"image size the shm and cache estimates assume ({ultra.DEFAULT_IMGSZ})",
    )
    p.set_defaults(func=cmd_doctor)
