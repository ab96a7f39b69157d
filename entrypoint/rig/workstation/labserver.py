"""`jupyter-python -I -m rig.workstation.labserver [--trust-home] ARGS`: JupyterLab, with its token
from stdin, started fast.

The token: this process runs from an execute-only copy of the interpreter (services.JUPYTER_PYTHON),
so the kernel makes it non-dumpable from its exec on: its /proc/PID/environ, fd/ and mem are root's,
and the sessions of user yolo, the same uid, can neither ptrace it nor take its descriptors
(pidfd_getfd) at any moment (prctl PR_SET_DUMPABLE 0 here says so again). Its stdin is a socket the
supervisor holds: the server asks for its token there, and rig.workstation.tokengate writes it only
to a process it has seen untraced, never stopped and never dumpable since its exec. The server gives
it to JupyterLab as command-line configuration, which outranks every config file, inside this
process only (`/proc/PID/cmdline` shows the original argv). Kernels and terminals are separate
programs started from readable ones (sys.executable is the venv's own `python` again): exec makes
them dumpable, as the user's own processes are, with /dev/null as stdin. The server's info files
(`jpserver-PID.json`, `jpserver-PID-open.html` in its runtime folder, which hold the token) are not
written.

The login cookie: tornado signs it with the server's cookie secret, which jupyter_server keeps in a
file of its runtime folder, the same at every start. Anyone who reads that file forges a login
cookie, and a login outlives the restart that was to revoke it. Here the secret is drawn at random
in this process, at every start, and never written: only the server has it, and a restart revokes
every login cookie with the token. The same for the key that signs trusted notebooks (whose HTML and
JavaScript outputs the browser runs), kept by nbformat in the data folder: drawn here, with the
signatures in memory, so no session can make a notebook trusted; trust lasts one start.

--trust-home (RIG_JUPYTER_TRUST_HOME=1): the user's packages in ~/.local become importable, after
the image's (so rig and the server's own packages stay the image's), .pth files included: the price
is in docs/security.md.

The port: the supervisor holds it and hands this process the listening socket
(rig.workstation.handover); the server serves on it instead of binding its own, and says so on its
ready pipe once its loop runs.

jsonschema imports `rfc3987_syntax` when it is installed (nbformat's `format-nongpl` extra pulls it
in), and that module compiles ~35 Lark parsers at import: seconds of the server's start on a busy
box, for an `iri` format no Jupyter schema uses (jupyter_server issue #1559). Marking it absent
makes jsonschema skip that one checker in this process only; kernels are separate processes and
keep it.
"""

import contextlib
import ctypes
import os
import secrets
import site
import sys
from pathlib import Path
from typing import Any

from rig import program
from rig.errors import RigError
from rig.workstation import handover, tokengate, userenv

PR_SET_DUMPABLE = 4
MIN_TOKEN = 16
TRUST_HOME = "--trust-home"


NOT_STARTED = 2  # what `rig serve` did not hand over (a token, the port): exit 2


def take_socket() -> handover.Taken:
    """The socket `rig serve` holds for this service (rig.workstation.handover), or exit 2 in one line."""
    with program.bad_input_exits(NOT_STARTED):
        try:
            return handover.take()
        except OSError as e:
            raise RigError(f"cannot take the socket `rig serve` holds: {e.strerror or e}") from None


def not_dumpable() -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def read_token() -> str:
    """The token, asked for on stdin (rig.workstation.tokengate) and read there (one line); then
    stdin becomes /dev/null for whatever the server starts."""
    with contextlib.suppress(OSError):  # a plain pipe (not the supervisor's socket): just read
        os.write(0, tokengate.ASK)
    token = os.read(0, 4096).decode(errors="replace").strip()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return token


def readable_python() -> None:
    """Kernels and the rest of what the server starts run the venv's own `python` (jupyter_client
    starts a kernel spec's `python` as sys.executable): readable, so dumpable like the user's
    processes, not this execute-only copy."""
    python = Path(sys.prefix) / "bin" / "python"
    if python.exists():
        sys.executable = str(python)


@program.entry("jupyter")
def main() -> int:
    not_dumpable()
    readable_python()
    token = read_token()
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise RigError("no token on stdin; start JupyterLab with `rig serve`", NOT_STARTED)
    taken = take_socket()
    taken.listener.setblocking(False)  # tornado's accept loop expects it
    args = sys.argv[1:]
    if args[:1] == [TRUST_HOME]:
        args = args[1:]
        site.addsitedir(str(userenv.site_packages()))
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # `import` now raises ImportError
    from jupyter_server.serverapp import ServerApp  # type: ignore[import-not-found,unused-ignore]
    from jupyterlab.labapp import LabApp  # type: ignore[import-not-found,unused-ignore]

    def skip(_self: Any, *_args: Any) -> None:
        return None

    def serve_on_the_held_socket(self: Any) -> None:  # called once the server's loop runs
        self.http_server.add_sockets([taken.listener])
        taken.ready()

    server: Any = ServerApp
    server.write_server_info_file = skip
    server.write_browser_open_files = skip
    server.write_browser_open_file = skip
    server._find_http_port = skip  # it would bind a test socket, refused: the port is held
    server._bind_http_server = serve_on_the_held_socket
    LabApp.launch_instance(
        argv=[
            *args,
            f"--IdentityProvider.token={token}",
            f"--ServerApp.cookie_secret={secrets.token_hex(32)}",
            f"--NotebookNotary.secret={secrets.token_hex(32)}",
            "--NotebookNotary.db_file=:memory:",
        ]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
