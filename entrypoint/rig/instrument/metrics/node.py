"""The node's /metrics server: one per node, reading what every rank of the node writes.

`serve_node` creates the ranks' directory (private, in the temporary directory), hands it to the
ranks through the environment they inherit, serves the directory's values plus the GPU gauges
(rig.instrument.metrics.server: bounded threads and time, to this host or to a bearer token only), and
`close` removes it all. A port that cannot be bound, or a token file gone unreadable since the
launch checked it, costs one WARNING: the run goes on unobserved.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from collections.abc import MutableMapping
from typing import Any

from rig import log
from rig.errors import RigError
from rig.instrument.metrics import access, config, server
from rig.instrument.metrics.gpus import GpuCollector

LOG = log.get("metrics")


class NodeServer:
    def __init__(self, endpoint: config.Endpoint, directory: str, server: Any, gpus: GpuCollector | None):
        self.endpoint = endpoint
        self.directory = directory
        self.port = int(server.server_address[1])  # the bound one (RIG_METRICS_PORT may not say)
        self._server = server
        self._gpus = gpus

    def close(self, environ: MutableMapping[str, str] | None = None) -> None:
        """Stop serving, release NVML, remove the ranks' directory; safe to call twice."""
        with contextlib.suppress(Exception):
            self._server.shutdown()
            self._server.server_close()
        if self._gpus is not None:
            self._gpus.close()
            self._gpus = None
        shutil.rmtree(self.directory, ignore_errors=True)
        if environ is not None:
            for key in config.publish_env(self.directory):
                environ.pop(key, None)


def serve_node(
    environ: MutableMapping[str, str], *, launcher: bool, nvml_module: Any | None = None
) -> NodeServer | None:
    """Serve this node's /metrics when this process is the one to (config.serves_node); None when it
    is not, when RIG_METRICS_PORT=0, or when the port cannot be bound (one WARNING)."""
    if not config.serves_node(environ, launcher=launcher):
        return None
    endpoint = config.endpoint(environ)
    if endpoint is None:
        return None
    log.setup()  # torchrun's launcher has not set rig's log lines up
    try:
        who = access.Access(config.token(environ), access.gateways())
    except RigError as e:
        LOG.warning("/metrics not served: %s; the run goes on without it", e)
        return None
    directory = tempfile.mkdtemp(prefix="rig-metrics-")  # 0700, a fresh name: no other process's files
    # Before prometheus-client is imported: it picks file-backed values once, from this variable, and
    # a trainer alone on the CPU publishes from this very process.
    environ.update(config.publish_env(directory))
    client: Any = importlib.import_module("prometheus_client")
    multiprocess: Any = importlib.import_module("prometheus_client.multiprocess")
    registry = client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)
    gpus = GpuCollector.open(environ, nvml_module)
    if gpus is not None:
        registry.register(gpus)
    try:
        http = server.serve(endpoint.addr, endpoint.port, client.make_wsgi_app(registry), who)
    except OSError as e:  # the port is taken, the address is not this host's...
        if gpus is not None:
            gpus.close()
        shutil.rmtree(directory, ignore_errors=True)
        for key in config.publish_env(directory):
            environ.pop(key, None)
        LOG.warning(
            "/metrics not served: cannot listen on %s:%d (%s); the run goes on without it "
            "(set %s to a free port, or 0 for none)",
            endpoint.addr,
            endpoint.port,
            e.strerror or e,
            config.PORT_ENV,
        )
        return None
    node = NodeServer(endpoint, directory, http, gpus)
    LOG.info(
        "%s for this node's ranks%s (%s=0 turns it off), %s",
        config.Endpoint(endpoint.addr, node.port).url(),
        f", {gpus.count} GPU(s)" if gpus is not None else "",
        config.PORT_ENV,
        f"to requests with the bearer token of {config.TOKEN_FILE_ENV}"
        if who.token is not None
        else f"to this host only ({config.TOKEN_FILE_ENV} opens it to a bearer token)",
    )
    return node
