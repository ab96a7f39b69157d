"""What `rig serve` runs: sshd, JupyterLab and TensorBoard, as pure descriptions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rig import paths, safepython
from rig.errors import RigError
from rig.workstation import labserver, sshd, userenv, users
from rig.workstation.serveconfig import without_secrets
from rig.workstation.spec import ServiceSpec

WORKSPACE = paths.WORKSPACE
RUNS = paths.RUNS
JUPYTER_PORT = 8888
TENSORBOARD_PORT = 6006
ALL = ("sshd", "jupyter", "tensorboard")
# JupyterLab's config folder: the image's, root's (docker/jupyter_server_config.json and jupyter_core's
# `migrated` marker). ~/.jupyter (yolo's) would let any session change how the server authenticates
# (a password hash, an empty token, an extension) from its next start on.
JUPYTER_CONFIG_DIR = paths.OPT / "jupyter"
# Its data folder (templates, kernel specs, lab extensions it loads first): the image's, root's and
# empty, instead of ~/.local/share/jupyter, where a session would plant code the server runs.
JUPYTER_DATA_DIR = paths.OPT / "jupyter-data"
# Its runtime folder (kernels' connection files): made afresh by `rig serve` at every start.
JUPYTER_RUNTIME_DIR = paths.RUN / "jupyter"
# The interpreter JupyterLab's server runs from: an execute-only copy of the venv's (root's, 0711,
# the Dockerfile): the kernel makes a process non-dumpable from the exec of a program its user cannot
# read, so no session can trace the server or take its descriptors, ever (rig.workstation.tokengate).
JUPYTER_PYTHON = "/opt/venv/libexec/jupyter-python"
JUPYTER_USER_DIR = users.HOME / ".jupyter/lab"  # JupyterLab's settings and workspaces: data, yolo's
# RIG_JUPYTER_TRUST_HOME=1: the server also loads what the user added in ~/.local (server and lab
# extensions, kernel specs, nbconvert templates, language servers), at the price in docs/security.md.
TRUST_HOME_ENV = "RIG_JUPYTER_TRUST_HOME"
_YES, _NO = {"1", "yes", "true", "on"}, {"", "0", "no", "false", "off"}


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


def trusts_home(environ: Mapping[str, str]) -> bool:
    raw = environ.get(TRUST_HOME_ENV, "").strip().lower()
    if raw not in _YES | _NO:
        raise RigError(f"{TRUST_HOME_ENV}={raw!r}: use 1 (load what you add in ~/.local) or 0 (the default)")
    return raw in _YES


def jupyter_spec(environ: Mapping[str, str], ids: users.Ids, token: Callable[[], str]) -> ServiceSpec:
    """JupyterLab; `token()`, asked for at every start of the server, travels on its stdin
    (rig.workstation.labserver, rig.workstation.tokengate): not in its environment, which every
    kernel and terminal inherits, not in argv, which every process sees, not on disk. Its port is
    held by the supervisor (rig.workstation.handover)."""
    trusted = trusts_home(environ)
    argv = (
        # `jupyter lab`, minus a slow import (see there); isolated (rig.safepython): nothing in its
        # working folder (/workspace: terminals open there) or ~/.local is imported into the server,
        # and Jupyter reads no config from its working folder. Trusting the home, ~/.local's
        # packages are importable after the image's.
        *safepython.module(JUPYTER_PYTHON, "rig.workstation.labserver", safepython.SERVICE),
        *([labserver.TRUST_HOME] if trusted else []),
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
        # Language servers found in ~/.local or on the PATH are probed (run) at every start: only
        # when the home is trusted (the image ships none). docker/jupyter_server_config.json has
        # the image's default (off).
        *(["--LanguageServerManager.autodetect=True"] if trusted else []),
    )
    env = users.session_environ(without_secrets(environ))
    env.update(
        JUPYTER_CONFIG_DIR=str(JUPYTER_CONFIG_DIR),
        JUPYTER_RUNTIME_DIR=str(JUPYTER_RUNTIME_DIR),
        JUPYTERLAB_SETTINGS_DIR=str(JUPYTER_USER_DIR / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(JUPYTER_USER_DIR / "workspaces"),
    )
    if trusted:  # what `pip install` of an extension puts in ~/.local (its prefix)
        env["JUPYTER_CONFIG_PATH"] = str(userenv.prefix(users.HOME) / "etc/jupyter")
    else:
        env["JUPYTER_DATA_DIR"] = str(JUPYTER_DATA_DIR)

    def stdin() -> bytes:
        return (token() + "\n").encode()

    return ServiceSpec(
        "jupyter", argv, JUPYTER_PORT, env, ids, WORKSPACE, stdin=stdin, stdin_guarded=True, listen="0.0.0.0"
    )


def tensorboard_spec(environ: Mapping[str, str], ids: users.Ids) -> ServiceSpec:
    argv = (
        # Below Jupyter and training in CPU priority: a viewer, and slow to start on a busy box.
        "nice",
        "-n",
        "10",
        # `tensorboard` on the socket the supervisor holds; isolated: no sitecustomize or package
        # from ~/.local or PYTHONPATH runs in it.
        *safepython.module("/opt/venv/bin/python", "rig.workstation.boardserver", safepython.SERVICE),
        f"--logdir={RUNS}",
        # No authentication of its own: reachable only inside the container, through JupyterLab's
        # proxy (/proxy/6006/, under the token) or an SSH tunnel (-L 6006:localhost:6006).
        "--host=127.0.0.1",
        f"--port={TENSORBOARD_PORT}",
    )
    # Without yolo's packages and scripts (~/.local): they are for sessions, never a service.
    env = users.service_environ(without_secrets(environ))
    return ServiceSpec("tensorboard", argv, TENSORBOARD_PORT, env, ids, listen="127.0.0.1")


def plan(
    names: Sequence[str],
    environ: Mapping[str, str],
    *,
    password_login: bool,
    ids: users.Ids,
    jupyter_token: Callable[[], str],
) -> list[ServiceSpec]:
    """The services `names`; `jupyter_token()` gives JupyterLab its token at each of its starts."""
    builders = {
        "sshd": lambda: sshd_spec(environ, password_login),
        "jupyter": lambda: jupyter_spec(environ, ids, jupyter_token),
        "tensorboard": lambda: tensorboard_spec(environ, ids),
    }
    return [builders[name]() for name in names]
