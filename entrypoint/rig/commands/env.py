"""`rig env`: the GPU environment rig sets, each variable with its value, who chose it and why."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from typing import Any

from rig.launch.gpuenv import MARKER, gpu_environment


def cmd_env(args: argparse.Namespace) -> int:
    entries = gpu_environment(os.environ)
    if args.json:
        print(json.dumps([asdict(e) for e in entries], indent=2))
        return 0
    width = max(len(f"{e.name}={e.value}") for e in entries if e.name != MARKER)
    for e in entries:
        origin = "set by you" if e.user_set else "rig default"
        print(f"{f'{e.name}={e.value}'.ljust(width)}  # {origin}: {e.reason}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="print the GPU environment: each variable, its value and why")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of the table")
    p.set_defaults(func=cmd_env)
