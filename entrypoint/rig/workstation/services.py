"""What `rig serve` runs: sshd, JupyterLab and TensorBoard, as pure descriptions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rig import paths, safepython
from rig.errors import RigError
from rig.workstation import sshd, users
from rig.workstation.serveconfig import without_secrets
from rig.workstation.spec import ServiceSpec

WORKSPACE = paths.WORKSPACE
RUNS = paths.RUNS
JUPYTER_PORT = 8888
TENSORBOARD_PORT = 6006
ALL = ("sshd", "jupyter", "tensorboard")
# JupyterLab's config folder: the image's, root's, empty (but for jupyter_core's `migrated` marker).
# ~/.jupyter (yolo's) would let any session change how the server authenticates (a password hash, an
# empty token, an extension) from its next start on.
JUPYTER_CONFIG_DIR = paths.OPT / "jupyter"
JUPYTER_USER_DIR = users.HOME / ".jupyter/lab"  # JupyterLab's settings and workspaces: data, yolo's


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
    # RIG_SSH_AGENT_FORWARDING=yes: `ssh -A` works (off unless asked: docker/sshd_config says why).
    forwarding = environ.get("RIG_SSH_AGENT_FORWARDING", "").strip().lower() in {"1", "yes", "true", "on"}
    argv = sshd.command(password_login, forwarding)
    return ServiceSpec("sshd", tuple(argv), sshd.PORT, without_secrets(environ))


def jupyter_spec(environ: Mapping[str, str], ids: users.Ids, token: str) -> ServiceSpec:
    """JupyterLab; `token` travels on its stdin (rig.workstation.labserver): not in its environment,
    which every kernel and terminal inherits, not in argv, which every process sees, not on disk."""
    argv = (
        # `jupyter lab`, minus a slow import (see there); isolated (rig.safepython): nothing in its
        # working folder (/workspace: terminals open there) or ~/.local is imported into the server,
        # and Jupyter reads no config from its working folder.
        *safepython.module("/opt/venv/bin/python", "rig.workstation.labserver", safepython.SERVICE),
        "--no-browser",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={JUPYTER_PORT}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={WORKSPACE}",
        # The token alone: no password to set from the login page (it would be written to a config).
        "--PasswordIdentityProvider.hashed_password=",
        "--PasswordIdentityProvider.allow_password_change=False",
        # The box is offline by default: no update checks or news feed from the browser's server.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    )
    env = users.session_environ(without_secrets(environ))
    env.update(
        JUPYTER_CONFIG_DIR=str(JUPYTER_CONFIG_DIR),
        JUPYTERLAB_SETTINGS_DIR=str(JUPYTER_USER_DIR / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(JUPYTER_USER_DIR / "workspaces"),
    )
    return ServiceSpec("jupyter", argv, JUPYTER_PORT, env, ids, WORKSPACE, stdin=(token + "\n").encode())


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
    return ServiceSpec("tensorboard", argv, TENSORBOARD_PORT, env, ids)


def plan(
    names: Sequence[str],
    environ: Mapping[str, str],
    *,
    password_login: bool,
    ids: users.Ids,
    jupyter_token: str = "",
) -> list[ServiceSpec]:
    builders = {
        "sshd": lambda: sshd_spec(environ, password_login),
        "jupyter": lambda: jupyter_spec(environ, ids, jupyter_token),
        "tensorboard": lambda: tensorboard_spec(environ, ids),
    }
    return [builders[name]() for name in names]
