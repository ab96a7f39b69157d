"""`python -P -m rig.launch.torchrun ARGS`: torchrun, with rig's stop deadline, exit codes, second
stop and its store bound to one address.

On SIGTERM, SIGINT or SIGHUP torchrun forwards the signal to its ranks and kills them 30 s later
(torch 2.3's fixed `PContext.close(timeout=30)`), whatever grace Docker, Kubernetes or Slurm give:
a rank still finishing a long batch or a validation pass loses its epoch. Here:
- those 30 s become RIG_STOP_GRACE (rig.launch.ddp);
- a second stop signal while the ranks save (a second Ctrl-C) kills every rank and its loader
  workers at once, instead of re-sending the signal and waiting the whole grace again (the ranks
  run in sessions of their own: a terminal's Ctrl-C reaches torchrun alone);
- once the ranks are gone, what is left of their process groups is killed (torch signals the group
  of each rank still running, not of one that died alone, whose torch.compile compiler processes ran
  on), so nothing of a rank outlives torchrun;
- a stop exits 128 + the signal, as a single process does, not 1 with torch's traceback: torch's
  agent re-raises the signal as an exception once the ranks are gone. When the ranks had finished
  the run (the signal came after their last stop check) it exits 0; when the ranks agreed on a stop
  torchrun itself did not get (another node's), it exits their 128 + signal, in one line. A rank
  that crashed during the stop, or was still running at the deadline, is never a clean stop: exit 1
  or 137, and an ERROR line naming it, so no scheduler requeues a crash as if it had been stopped;
- for `rig train` it serves the node's /metrics (rig.instrument.metrics) while its ranks run.

The store: torch's TCPStore listens on every interface whatever host it is given, so any container
on the network could read and write the job's keys. Here node 0's store listens on its master
address alone (the loopback for a single node): a socket bound there is handed to TCPStore
(`master_listen_fd`). `--master-port 0` (single node) means a free port, chosen here and held open
until the store takes it, so two jobs never race for one. A single node also keeps gloo and NCCL on
the loopback (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, unless the job sets them). Everything else is
torchrun's own.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from types import FrameType
from typing import Any

from rig import log, program
from rig.errors import RigError
from rig.instrument import metrics
from rig.launch import ddp

_logger = log.get("torchrun")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_CODES = frozenset(128 + s for s in STOP_SIGNALS)
# A bad setting, or a store it cannot bind, before torchrun starts: exit 2, as torchrun's own usage errors.
USAGE = 2
# The ranks' exit codes, as the last close of their process context left them.
_EXIT_CODES: dict[int, int | None] = {}
_KILLED_ON_REQUEST = [False]  # a second stop signal killed the ranks


def kill_ranks(pids: dict[int, int]) -> None:
    """SIGKILL each rank's process group (the rank and its loader workers: a rank leads its session)."""
    for pid in pids.values():
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
                break


def end_leftovers(pids: dict[int, int]) -> None:
    """SIGKILL what is left of each rank's process group once torch's close has reaped the ranks.

    torch's close signals the process group of each rank still running (its TERM, its KILL at the
    deadline), but skips a rank that already exited: one the OOM killer or a crash ended alone leaves
    its children running, such as the compiler processes torch.compile starts (inductor's g++ and its
    worker pool, all in the rank's group), which nothing else would end. A group outlives its leader
    while any member lives, so its id cannot have been reused by then; an empty group is ESRCH."""
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def second_stop_kills(context: Any) -> Iterator[None]:
    """While the ranks get their grace, a further stop signal kills them now."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def now(signum: int, _frame: FrameType | None) -> None:
        # Acts in the handler: torch's close is blocked in a wait this code cannot otherwise reach.
        _logger.info("signal %d again: killing the ranks now (their last save may be lost)", signum)
        _KILLED_ON_REQUEST[0] = True
        kill_ranks(context.pids())

    kept = {s: signal.signal(s, now) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in kept.items():
            signal.signal(s, handler)


def _record_exit_codes(context: Any) -> None:
    handlers = getattr(context, "subprocess_handlers", None) or {}
    _EXIT_CODES.clear()
    _EXIT_CODES.update({rank: h.proc.poll() for rank, h in handlers.items()})


LOOPBACK = "127.0.0.1"


def install(grace_s: int) -> None:
    """Every torchrun process context waits grace_s (not 30 s) before it kills its ranks, and a
    second stop signal during that wait kills them at once."""
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    original = getattr(api.PContext.close, "rig_original", api.PContext.close)

    def close(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        pids = dict(self.pids())
        with second_stop_kills(self):
            original(self, death_sig, max(timeout, grace_s))
        end_leftovers(pids)
        _record_exit_codes(self)

    close.rig_original = original  # type: ignore[attr-defined]
    api.PContext.close = close


def stop_exit_code(signum: int, rank_codes: dict[int, int | None], killed_on_request: bool = False) -> int:
    """What torchrun exits with after a stop signal: 128 + it when the ranks stopped on a signal (they
    saved and exited 128 + the signal they agreed on, or died of the stop signal itself before they
    could take it), or were killed by a second stop; 0 when every rank finished the run. Anything
    else is not a clean stop and never looks like one: 128 + 9 when a rank was still running at the
    stop deadline (killed: its work since the last checkpoint is lost), 1 when one crashed."""
    codes = set(rank_codes.values())
    if codes and codes == {0}:
        return 0
    if killed_on_request:
        return 128 + signum
    stopped = {0, *STOP_CODES, *(-s for s in STOP_SIGNALS)}
    if codes <= stopped:
        return 128 + signum
    if codes <= stopped | {-signal.SIGKILL}:
        return 128 + signal.SIGKILL
    return 1


def unclean(rank_codes: dict[int, int | None]) -> list[str]:
    """The ranks that did not stop cleanly, for the log: 'rank 1 exited 1'."""
    stopped = {0, *STOP_CODES, *(-s for s in STOP_SIGNALS)}
    out = []
    for rank, code in sorted(rank_codes.items()):
        if code == -signal.SIGKILL:
            out.append(f"rank {rank} was killed at the stop deadline ({ddp.STOP_GRACE_ENV})")
        elif code not in stopped:
            out.append(f"rank {rank} exited {code} (a crash: see its error above)")
    return out


def agreed_stop(failures: dict[int, Any], rank_codes: dict[int, int | None]) -> int | None:
    """The exit code of ranks that all stopped on one agreed signal (128 + it), or None. failures:
    torch's, which lists the first rank that failed; rank_codes: every rank's, where known, except
    those torchrun killed itself once that rank had failed (its closing signal: a negative code)."""
    codes = {int(getattr(f, "exitcode", -1)) for f in failures.values()}
    codes |= {c for c in rank_codes.values() if c is not None and c >= 0}
    return codes.pop() if len(codes) == 1 and codes <= STOP_CODES else None


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


@program.entry("torchrun")
def main() -> int:
    log.setup()
    with program.bad_input_exits(USAGE):
        grace = ddp.stop_grace(os.environ)
        argv, sockets = prepare(sys.argv[1:], os.environ)
    install(grace)
    bind_store(sockets)
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    errors: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.errors")
    node = metrics.serve_node(os.environ, launcher=True)  # rig train's: this node's /metrics
    run: Any = importlib.import_module("torch.distributed.run")
    try:
        run.main(argv)
    except api.SignalException as e:
        code = stop_exit_code(int(e.sigval), _EXIT_CODES, _KILLED_ON_REQUEST[0])
        codes = ", ".join(f"{r}: {c}" for r, c in sorted(_EXIT_CODES.items()))
        _logger.info("signal %d: the ranks exited (local rank: code) %s; exit %d", int(e.sigval), codes, code)
        if code != 128 + int(e.sigval) and code != 0:
            _logger.error("not a clean stop: %s", "; ".join(unclean(_EXIT_CODES)))
        return code
    except errors.ChildFailedError as e:
        stopped = agreed_stop(e.failures, _EXIT_CODES)
        if stopped is None:
            raise
        _logger.info(
            "the ranks stopped on signal %d, which another node got; exit %d", stopped - 128, stopped
        )
        return stopped
    finally:
        if node is not None:
            node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
