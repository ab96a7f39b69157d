"""`rig exec -- CMD`: the image's ENTRYPOINT. Prepare the environment, then exec CMD.

Started as root it gives user yolo the ids in RIG_UID/RIG_GID, applies the GPU environment and the
proxy's (rig.proxyenv), and
runs CMD as yolo, except `rig serve` (sshd needs root; it drops privileges for its services) and
RIG_USER=root. Started as another user (`docker run --user`, Apptainer), it execs CMD as that user.
Before the exec, as the user, Ultralytics' settings are seeded into the user's folder
(rig.yolo.settings), and where the image's folders are read-only (Apptainer) the places the command
writes move to the user's own (rig.places). Where the runtime passed the host's environment in
(Apptainer), the host's variables that would break the image are dropped first (rig.hostenv).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rig import hostenv, log, paths, places, proxyenv
from rig.errors import RigError
from rig.launch import gpuenv
from rig.userids import UID_ENV
from rig.workstation import ownership, users
from rig.workstation.serveconfig import without_secrets
from rig.yolo import settings

_logger = log.get("exec")


# torch.compile's caches (the image's TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR) hold code that the
# next run loads and executes. The `cache` volume is yolo's: a command that stays root
# (RIG_USER=root) keeps its own in root's home instead, never shared with a user or another job.
COMPILE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
ROOT_COMPILE_CACHE = Path("/root/.cache/torch")


def root_compile_caches(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for a command that stays root: compile caches outside the user volumes."""
    env = dict(environ)
    for name, folder in COMPILE_CACHES.items():
        value = env.get(name, "")
        if not value or any(Path(value).is_relative_to(v) for v in paths.USER_VOLUMES):
            env[name] = str(ROOT_COMPILE_CACHE / folder)
    return env


def is_serve(command: Sequence[str]) -> bool:
    return len(command) >= 2 and os.path.basename(command[0]) == "rig" and command[1] == "serve"


def stays_root(command: Sequence[str], environ: Mapping[str, str]) -> bool:
    return is_serve(command) or environ.get("RIG_USER", "").strip() == "root"


def cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise RigError("rig exec: no command given; usage: rig exec -- COMMAND [ARG...]")
    cleaned = hostenv.cleaned(os.environ)  # Apptainer: the host's PYTHONPATH & co. would break the image
    if cleaned.dropped:
        _logger.warning("%s", hostenv.line(cleaned.dropped))
    env = gpuenv.updated(cleaned.env)  # the GPU variables; the user's own values win
    env = proxyenv.updated(env, proxyenv.prepare_bundle())  # a corporate proxy and its CA, if given
    user = env.get("RIG_USER", "").strip()
    if user not in ("", users.USER, "root"):
        raise RigError(f"RIG_USER={user!r}: use `yolo` (the default) or `root`")
    if not is_serve(command):
        env = without_secrets(env)  # rig serve hands each secret to its one consumer
    if os.geteuid() == 0:
        ids = users.requested_ids(env, users.current_ids())
        users.remap(ids)
        ownership.follow_ids(ids, budget_s=ownership.budget(env))
        if not stays_root(command, env):
            env = users.session_environ(env)
            users.drop_privileges(ids)
        elif not is_serve(command):
            env = root_compile_caches(env)
    elif env.get(UID_ENV, "").strip() and env[UID_ENV].strip() != str(os.geteuid()):
        raise RigError(
            f"{UID_ENV}={env[UID_ENV]} needs the container to start as root, but it runs as uid "
            f"{os.geteuid()}; remove `--user` / `user:` (the entrypoint switches to yolo itself)"
        )
    if not is_serve(command):  # rig serve seeds them for its services, as yolo (workspace.prepare)
        env = settings.prepared_environ(env, root=os.geteuid() == 0)
        if os.geteuid() != 0:
            env, lines = places.prepared(env, os.geteuid())
            for level, text in lines:
                _logger.log(level, "%s", text)
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        raise RigError(f"command not found: {command[0]!r}; is it installed in the image?", 127) from None
    except PermissionError:
        raise RigError(f"command not executable: {command[0]!r}", 126) from None
    return 0  # not reached: exec replaced this process


def register(sub: Any) -> None:
    p = sub.add_parser("exec", help="prepare the environment and run a command (the image's entrypoint)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    p.set_defaults(func=cmd_exec)
