"""`rig exec -- CMD`: the image's ENTRYPOINT. Prepare the environment, log it, then exec CMD."""

import argparse
import os
from typing import Any

from rig import log
from rig.errors import RigError

_logger = log.get("exec")


def cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise RigError("rig exec: no command given; usage: rig exec -- COMMAND [ARG...]")
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        raise RigError(f"command not found: {command[0]!r}; is it installed in the image?", 127) from None
    except PermissionError:
        raise RigError(f"command not executable: {command[0]!r}", 126) from None
    return 0  # not reached: exec replaced this process


def register(sub: Any) -> None:
    p = sub.add_parser("exec", help="prepare the environment and run a command (the image's entrypoint)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    p.set_defaults(func=cmd_exec)
