"""The environment contract of rig's metrics: every variable it reads or hands a rank, spelled once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rig import flags
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


@dataclass(frozen=True)
class Endpoint:
    addr: str
    port: int

    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"


def endpoint(environ: Mapping[str, str]) -> Endpoint | None:
    """Where the node serves /metrics; None for RIG_METRICS_PORT=0. RigError for a port that is none."""
    raw = environ.get(PORT_ENV, "").strip()
    if not raw:
        port = DEFAULT_PORT
    elif raw.isdigit() and int(raw) <= 65535:
        port = int(raw)
    else:
        raise RigError(
            f"{PORT_ENV}={raw!r} is not a TCP port; use 1-65535 (default {DEFAULT_PORT}), "
            "or 0 to serve no metrics"
        )
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
