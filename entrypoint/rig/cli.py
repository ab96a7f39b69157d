"""`rig`: the image's entrypoint. Each command is a function returning an exit code.

Every command lives in its own module under rig/commands/, which exposes `register(subparsers)`;
heavy imports (torch, ultralytics) happen inside the command functions so `rig --version` stays
instant.
"""

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from rig import log, spelling, versions
from rig.errors import RigError

# One module per command, in the order `rig --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "rig.commands.exec",
    "rig.commands.serve",
    "rig.commands.health",
    "rig.commands.demo_data",
    "rig.commands.weights",
    "rig.commands.datasets",
    "rig.commands.bench",
    "rig.commands.yolo",
    "rig.commands.export",
    "rig.commands.doctor",
    "rig.commands.plan",
    "rig.commands.train",
    "rig.commands.launch",
    "rig.commands.env",
)


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the image's stack versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(versions.describe())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rig", description="The yolo-rig training box.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    log.setup()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value arguments on both sides of an option (`rig train device=cpu --cpu-ranks 2 epochs=3`):
    # argparse ends a positional list at the first option; a command that says so takes the rest.
    intermixed = getattr(args, "intermixed", None)
    if extra and intermixed and not any(e.startswith("-") for e in extra):
        getattr(args, intermixed).extend(extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
        return code
    except RigError as e:
        # The option as the user typed it: `--gpus 9`, or `GPUS=9` under `make train` (rig.spelling).
        logging.getLogger("rig").error("%s", e.line(spelling.from_environ(os.environ)))
        return e.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
