"""`rig serve`: the workstation (SSH, JupyterLab, TensorBoard), supervised. The image's default command.

Order matters: every input is checked first (bad input exits with one line before anything
listens), then state is prepared (host keys, token, session environment), then the supervisor
starts the services and stays in the foreground until SIGTERM, which it passes on to the jobs of
the users' sessions before stopping the services (rig.workstation.sessions).
"""

from __future__ import annotations

import argparse
import os
import queue
import secrets
import shutil
from pathlib import Path
from typing import Any

from rig import envnumbers, hostenv, log, paths, userids
from rig.errors import RigError
from rig.workstation import home, serveconfig, services, sessionenv, sshd, urls, users, workspace
from rig.workstation.supervisor import SESSION_GRACE_ENV, Policy, Supervisor, install_signal_handlers

STATE_DIR = paths.STATE  # the `state` volume
OLD_TOKEN_FILE = STATE_DIR / "jupyter_token"  # where a token was kept for good before
STATE_FILE = paths.SERVICES_STATE
STOP_TIMEOUT_ENV = "RIG_STOP_TIMEOUT"  # the services' time between TERM and KILL
_STOPS = (
    f"compose's stop_grace_period (`docker stop -t`) must exceed {SESSION_GRACE_ENV} + {STOP_TIMEOUT_ENV}"
)
# The users' jobs get TERM and SESSION_GRACE to save their work; then the services get TERM and
# STOP_TIMEOUT before KILL. Above RIG_STOP_GRACE (90 s): a `rig train` in a session gets its whole
# stop, and torchrun its exit.
SESSION_GRACE = envnumbers.Number(
    SESSION_GRACE_ENV, low=0, high=3600, default=100, unit="seconds", hint=_STOPS, empty_is_unset=False
)
STOP_TIMEOUT = envnumbers.Number(
    STOP_TIMEOUT_ENV, low=1, high=300, default=10, unit="seconds", hint=_STOPS, empty_is_unset=False
)
# The host's ports, as compose publishes them: for the lines that say how to come in.
SSH_PUBLISHED_PORT = envnumbers.Number(
    "RIG_SSH_PUBLISHED_PORT",
    low=1,
    high=65535,
    default=sshd.PORT,
    whole=True,
    hint="the host port compose publishes SSH on",
)
JUPYTER_PUBLISHED_PORT = envnumbers.Number(
    "RIG_JUPYTER_PUBLISHED_PORT",
    low=1,
    high=65535,
    default=services.JUPYTER_PORT,
    whole=True,
    hint="the host port compose publishes JupyterLab on",
)

_logger = log.get("serve")


def fresh_runtime_dir(path: Path, ids: users.Ids) -> None:
    """JupyterLab's runtime folder, empty and new at every start: nothing of the last start's (a
    kernel's connection file, a planted secret) is there. Its parent is root's; shutil.rmtree
    follows no link (it works on descriptors), and the new folder is chowned through its descriptor."""
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.mkdir(mode=0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, ids.uid, ids.gid)
    finally:
        os.close(fd)


# Apptainer starts everything as the calling user: sshd cannot run, the work itself can.
UNDER_APPTAINER = (
    "rig serve (sshd, JupyterLab, TensorBoard) cannot run under Apptainer, which starts everything as "
    "you, uid {uid}: run the work itself, `apptainer run --nv IMAGE rig train ...`, or a Jupyter server "
    "of your own on a port of yours, `apptainer run IMAGE jupyter lab --no-browser --port 8899` "
    "(docs/training.md, Apptainer)"
)


def cmd_serve(args: argparse.Namespace) -> int:
    if os.geteuid() != 0 and hostenv.passes_host_env(os.environ):
        raise RigError(UNDER_APPTAINER.format(uid=os.geteuid()))
    if os.geteuid() != 0:
        raise RigError(
            "rig serve must start as root (sshd needs it; the services run as user yolo); remove `--user` "
            f"/ `user:` and set {userids.BOTH} to choose yolo's ids"
        )
    environ = dict(os.environ)
    names = services.enabled(environ)
    services.trusts_home(environ)  # a bad value stops the start here, in one line
    ids = users.current_ids()
    config = serveconfig.load(environ, ids=ids)
    session_grace = SESSION_GRACE.read(environ)
    stop_timeout = STOP_TIMEOUT.read(environ)
    ssh_port, jupyter_port = SSH_PUBLISHED_PORT.read_int(environ), JUPYTER_PUBLISHED_PORT.read_int(environ)

    # Queue signals from here on: a TERM during the start is handled as a clean stop.
    STATE_FILE.unlink(missing_ok=True)  # a restarted container must not look healthy from the last run
    events: queue.SimpleQueue[int] = queue.SimpleQueue()
    install_signal_handlers(events)

    STATE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    sessionenv.write(environ)
    home.prepare(ids)  # as yolo, in a child with a deadline: root never acts in the home folder
    ssh_line = None  # how to come in: logged, and written for `make up` (rig.workstation.urls)
    if "sshd" in names:
        sshd.prepare_runtime_dir()
        for print_ in sshd.ensure_host_keys():
            _logger.info("SSH host key %s", print_)
        sshd.install_keys(list(config.keys), users.USER)
        sshd.set_password(users.USER, config.password)
        how = ", ".join(
            [f"{len(config.keys)} key(s)"] * bool(config.keys)
            + ["a password"] * (config.password is not None)
        )
        if how:
            ssh_line = f"SSH: ssh -p {ssh_port} {users.USER}@HOST ({how})"
        else:
            _logger.warning(
                "SSH: no key and no password, nobody can log in; set SSH_PUBLIC_KEY (or mount "
                "/run/secrets/authorized_keys, or set SSH_PASSWORD_FILE)"
            )
    if "jupyter" in names or "tensorboard" in names:
        workspace.prepare(ids)  # as yolo, in a child with a deadline: root never acts in /workspace
    if "jupyter" in names:
        fresh_runtime_dir(services.JUPYTER_RUNTIME_DIR, ids)
    OLD_TOKEN_FILE.unlink(missing_ok=True)  # kept for good before: revoked
    jupyter_url = f"http://localhost:{jupyter_port}/lab"
    entrances = urls.Entrances(
        ssh_line, jupyter_url if "jupyter" in names else None, token_set=config.jupyter_token is not None
    )
    board = urls.Board(entrances)
    if "jupyter" not in names:
        board.publish()

    def jupyter_token() -> str:
        """Drawn at every start of the server: a token that leaked (a session read it) ends with the
        next restart of JupyterLab, and the URL logged and in /run/rig/urls follow."""
        token = config.jupyter_token or secrets.token_hex(24)
        board.publish(token)
        return token

    specs = services.plan(
        names, environ, password_login=config.password is not None, ids=ids, jupyter_token=jupyter_token
    )
    policy = Policy(session_grace=session_grace, stop_timeout=stop_timeout)
    supervisor = Supervisor(specs, events=events, policy=policy, state_file=STATE_FILE, session_uid=ids.uid)
    return supervisor.run()


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run sshd, JupyterLab and TensorBoard, supervised (the default command)")
    p.set_defaults(func=cmd_serve)
