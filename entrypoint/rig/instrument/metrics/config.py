"""The environment contract of rig's metrics: every variable it reads or hands a rank, spelled once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rig import envnumbers, flags, safefs
from rig.errors import RigError

ADDR_ENV = "RIG_METRICS_ADDR"
PORT_ENV = "RIG_METRICS_PORT"
DEFAULT_ADDR = "0.0.0.0"
DEFAULT_PORT = 9464  # the port Prometheus' registry of exporters gives to an application's own metrics
# Set by `rig train` for the process that serves the node: the torchrun launcher, or the trainer
# when it runs alone (no torchrun, so no LOCAL_RANK).
NODE_ENV = "RIG_METRICS_NODE"
# prometheus-client's own: where each process of the node writes its values (multiprocess mode).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DIR_ENV = "RIG_METRICS_DIR"  # the same directory, set only by a server that is up
# A file holding the bearer token every request must send (rig.instrument.metrics.access); unset: the
# server answers this host only.
TOKEN_FILE_ENV = "RIG_METRICS_TOKEN_FILE"
PORT = envnumbers.Number(
    PORT_ENV,
    low=0,
    high=65535,
    default=DEFAULT_PORT,
    whole=True,
    hint="the TCP port of the node's /metrics, 0 to serve none",
)
MIN_TOKEN_CHARS = 16  # as the Jupyter token
_MAX_TOKEN_FILE = 4096


@dataclass(frozen=True)
class Endpoint:
    addr: str
    port: int

    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"


def endpoint(environ: Mapping[str, str]) -> Endpoint | None:
    """Where the node serves /metrics; None for RIG_METRICS_PORT=0. RigError for a port that is none."""
    port = PORT.read_int(environ)
    if port == 0:
        return None
    return Endpoint(environ.get(ADDR_ENV, "").strip() or DEFAULT_ADDR, port)


def node_env() -> dict[str, str]:
    """What `rig train` adds to the launch's environment: its launcher serves the node's metrics."""
    return {NODE_ENV: "1"}


def serves_node(environ: Mapping[str, str], *, launcher: bool) -> bool:
    """Whether this process serves: the launcher always (when rig train asked), a trainer only alone."""
    if not flags.switched_on(environ, NODE_ENV) or NODE_ENV not in environ:
        return False
    return launcher or "LOCAL_RANK" not in environ


def publish_env(directory: str) -> dict[str, str]:
    """What the serving process hands its ranks: where to write their values."""
    return {DIR_ENV: directory, MULTIPROC_ENV: directory}


def publish_dir(environ: Mapping[str, str]) -> str | None:
    """The node's directory when a server of rig's reads it (not a PROMETHEUS_MULTIPROC_DIR of
    someone else's), else None."""
    directory = environ.get(DIR_ENV)
    return directory if directory and environ.get(MULTIPROC_ENV) == directory else None


def token(environ: Mapping[str, str]) -> str | None:
    """The bearer token in RIG_METRICS_TOKEN_FILE (its one line, trimmed); None when unset. RigError
    for a file that cannot be read or a token that is too short to keep anyone out."""
    path = environ.get(TOKEN_FILE_ENV, "").strip()
    if not path:
        return None
    how = f"put a token of {MIN_TOKEN_CHARS} characters or more in it (e.g. `openssl rand -hex 32`)"
    try:
        raw = safefs.read_input(path, _MAX_TOKEN_FILE).decode().strip()
    except (OSError, UnicodeDecodeError, safefs.Skipped) as e:
        why = getattr(e, "strerror", None) or e
        where = f"{TOKEN_FILE_ENV}={path}"
        raise RigError(f"{where}: cannot be read ({why}); {how}, readable by the run") from None
    if len(raw) < MIN_TOKEN_CHARS or any(c.isspace() for c in raw):
        raise RigError(f"{TOKEN_FILE_ENV}={path}: not a usable token; {how}, on one line")
    return raw
