"""What `rig serve` runs: sshd, JupyterLab and TensorBoard, as pure descriptions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from rig import paths
from rig.errors import RigError
from rig.workstation import sshd, users
from rig.workstation.serveconfig import without_secrets
from rig.workstation.spec import ServiceSpec

WORKSPACE = paths.WORKSPACE
RUNS = paths.RUNS
JUPYTER_PORT = 8888
TENSORBOARD_PORT = 6006
ALL = ("sshd", "jupyter", "tensorboard")
# JupyterLab's token, in a config file only yolo can read: an environment variable would be
# inherited by every kernel and terminal, and argv is visible to every process.
JUPYTER_TOKEN_CONFIG = paths.RUN / "jupyter_token_config.json"


def enabled(environ: Mapping[str, str]) -> tuple[str, ...]:
    """RIG_SERVICES: a comma-separated subset of sshd,jupyter,tensorboard (default: all)."""
    raw = environ.get("RIG_SERVICES", "").strip()
    if not raw:
        return ALL
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    unknown = [n for n in names if n not in ALL]
    if unknown or not names:
        raise RigError(f"RIG_SERVICES={raw!r}: unknown service {unknown!r}; choose among {','.join(ALL)}")
    return names


def sshd_spec(environ: Mapping[str, str], password_login: bool) -> ServiceSpec:
    # sshd gives each login a clean environment; the session's comes from rig.workstation.sessionenv.
    return ServiceSpec("sshd", tuple(sshd.command(password_login)), sshd.PORT, without_secrets(environ))


def jupyter_token_config(token: str) -> bytes:
    return (json.dumps({"IdentityProvider": {"token": token}}) + "\n").encode()


def jupyter_spec(environ: Mapping[str, str], ids: users.Ids) -> ServiceSpec:
    argv = (
        "/opt/venv/bin/python",
        "-m",
        "rig.workstation.labserver",  # `jupyter lab`, minus a slow import (see there)
        "--no-browser",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={JUPYTER_PORT}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={WORKSPACE}",
        # The box is offline by default: no update checks or news feed from the browser's server.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        f"--config={JUPYTER_TOKEN_CONFIG}",
    )
    env = users.session_environ(without_secrets(environ))
    return ServiceSpec("jupyter", argv, JUPYTER_PORT, env, ids, WORKSPACE)


def tensorboard_spec(environ: Mapping[str, str], ids: users.Ids) -> ServiceSpec:
    argv = (
        # Below Jupyter and training in CPU priority: a viewer, and slow to start on a busy box.
        "nice",
        "-n",
        "10",
        "/opt/venv/bin/tensorboard",
        f"--logdir={RUNS}",
        # No authentication of its own: reachable only inside the container, through JupyterLab's
        # proxy (/proxy/6006/, under the token) or an SSH tunnel (-L 6006:localhost:6006).
        "--host=127.0.0.1",
        f"--port={TENSORBOARD_PORT}",
    )
    env = users.session_environ(without_secrets(environ))
    return ServiceSpec("tensorboard", argv, TENSORBOARD_PORT, env, ids, WORKSPACE)


def plan(
    names: Sequence[str], environ: Mapping[str, str], *, password_login: bool, ids: users.Ids
) -> list[ServiceSpec]:
    builders = {
        "sshd": lambda: sshd_spec(environ, password_login),
        "jupyter": lambda: jupyter_spec(environ, ids),
        "tensorboard": lambda: tensorboard_spec(environ, ids),
    }
    return [builders[name]() for name in names]
