"""`python -P -m rig.launch.torchrun ARGS`: torchrun, with the stop deadline the environment gives
and its store bound to one address.

On SIGTERM, SIGINT or SIGHUP torchrun forwards the signal to its ranks and kills them 30 s later
(torch 2.3's fixed `PContext.close(timeout=30)`), whatever grace Docker, Kubernetes or Slurm give:
a rank still finishing a long batch or a validation pass loses its epoch. Here those 30 s become
RIG_STOP_GRACE (rig.launch.ddp).

The store: torch's TCPStore listens on every interface whatever host it is given, so any container
on the network could read and write the job's keys. Here node 0's store listens on its master
address alone (the loopback for a single node): a socket bound there is handed to TCPStore
(`master_listen_fd`). `--master-port 0` (single node) means a free port, chosen here and held open
until the store takes it, so two jobs never race for one. A single node also keeps gloo and NCCL on
the loopback (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, unless the job sets them). Everything else is
torchrun's own `main`.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from rig import log
from rig.errors import RigError
from rig.launch import ddp

LOOPBACK = "127.0.0.1"
_logger = log.get("torchrun")


def install(grace_s: int) -> None:
    """Make every torchrun process context wait grace_s (not 30 s) before it kills its ranks."""
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    original = getattr(api.PContext.close, "rig_original", api.PContext.close)

    def close(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        original(self, death_sig, max(timeout, grace_s))

    close.rig_original = original  # type: ignore[attr-defined]
    api.PContext.close = close


def _option(argv: Sequence[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host's address alone (OSError when it is not this machine's)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def with_port(argv: list[str], port: int) -> list[str]:
    """argv with a chosen port in place of --master-port 0 and the endpoint's :0."""
    out = list(argv)
    out[out.index("--master-port") + 1] = str(port)
    if "--rdzv-endpoint" in out:
        i = out.index("--rdzv-endpoint") + 1
        out[i] = f"{out[i].rsplit(':', 1)[0]}:{port}"
    return out


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def loopback_backends(environ: MutableMapping[str, str]) -> None:
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        environ.setdefault(name, "lo")


def bind_store(sockets: dict[tuple[str, int], socket.socket]) -> None:
    """Static rendezvous' TCPStore on node 0 listens on a socket bound to its master address."""
    static: Any = importlib.import_module("torch.distributed.elastic.rendezvous.static_tcp_rendezvous")
    original: Callable[..., Any] = getattr(static.TCPStore, "rig_original", static.TCPStore)

    def store(host: str, port: int, world_size: int, is_master: bool, *args: Any, **kwargs: Any) -> Any:
        if is_master and "master_listen_fd" not in kwargs:
            sock = sockets.pop((host, port), None)
            if sock is None:
                try:
                    sock = listen(host, port)
                except OSError as e:
                    _logger.warning(
                        "the store cannot listen on %s:%d alone (%s): it listens on every interface",
                        host,
                        port,
                        e.strerror or e,
                    )
            if sock is not None:
                fd = sock.detach()  # the store's from now on
                try:
                    return original(host, port, world_size, is_master, *args, master_listen_fd=fd, **kwargs)
                except (RuntimeError, TypeError, ValueError) as e:  # a torch whose store cannot take it
                    os.close(fd)
                    _logger.warning(
                        "the store cannot take a socket bound to %s:%d (%s): it listens on every interface",
                        host,
                        port,
                        e,
                    )
        return original(host, port, world_size, is_master, *args, **kwargs)

    store.rig_original = original  # type: ignore[attr-defined]
    static.TCPStore = store


def prepare(argv: list[str], environ: MutableMapping[str, str]) -> tuple[list[str], dict[Any, socket.socket]]:
    """The arguments torchrun gets, and the sockets held for its store."""
    sockets: dict[tuple[str, int], socket.socket] = {}
    host, port = _option(argv, "--master-addr"), _option(argv, "--master-port")
    if host is None or port is None:
        return argv, sockets
    if is_loopback(host):
        loopback_backends(environ)
    if port == "0":
        try:
            sock = listen(host, 0)
        except OSError as e:
            raise RigError(f"cannot listen on {host} for torchrun's store: {e.strerror or e}") from None
        argv = with_port(argv, sock.getsockname()[1])
        sockets[(host, sock.getsockname()[1])] = sock
    return argv, sockets


def main() -> int:
    try:
        grace = ddp.stop_grace(os.environ)
        argv, sockets = prepare(sys.argv[1:], os.environ)
    except RigError as e:
        print(f"ERROR torchrun: {e}", file=sys.stderr)
        return 2
    install(grace)
    bind_store(sockets)
    run: Any = importlib.import_module("torch.distributed.run")
    run.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
