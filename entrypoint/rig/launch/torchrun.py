"""`python -m rig.launch.torchrun ARGS`: torchrun, with rig's stop deadline, exit codes and second stop.

On SIGTERM, SIGINT or SIGHUP torchrun forwards the signal to its ranks and kills them 30 s later
(torch 2.3's fixed `PContext.close(timeout=30)`), whatever grace Docker, Kubernetes or Slurm give:
a rank still finishing a long batch or a validation pass loses its epoch. Here:
- those 30 s become RIG_STOP_GRACE (rig.launch.ddp);
- a second stop signal while the ranks save (a second Ctrl-C) kills every rank and its loader
  workers at once, instead of re-sending the signal and waiting the whole grace again (the ranks
  run in sessions of their own: a terminal's Ctrl-C reaches torchrun alone);
- a stop exits 128 + the signal, as a single process does, not 1 with torch's traceback: torch's
  agent re-raises the signal as an exception once the ranks are gone. When the ranks had finished
  the run (the signal came after their last stop check) it exits 0; when the ranks agreed on a stop
  torchrun itself did not get (another node's), it exits their 128 + signal, in one line;
- for `rig train` it serves the node's /metrics (rig.observe.metrics) while its ranks run.
Everything else is torchrun's own.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from rig import log
from rig.errors import RigError
from rig.launch import ddp
from rig.observe import metrics

_logger = log.get("torchrun")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_CODES = frozenset(128 + s for s in STOP_SIGNALS)
# The ranks' exit codes, as the last close of their process context left them.
_EXIT_CODES: dict[int, int | None] = {}


def kill_ranks(pids: dict[int, int]) -> None:
    """SIGKILL each rank's process group (the rank and its loader workers: a rank leads its session)."""
    for pid in pids.values():
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, signal.SIGKILL)
                break


@contextlib.contextmanager
def second_stop_kills(context: Any) -> Iterator[None]:
    """While the ranks get their grace, a further stop signal kills them now."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def now(signum: int, _frame: FrameType | None) -> None:
        # Acts in the handler: torch's close is blocked in a wait this code cannot otherwise reach.
        _logger.info("signal %d again: killing the ranks now (their last save may be lost)", signum)
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


def install(grace_s: int) -> None:
    """Every torchrun process context waits grace_s (not 30 s) before it kills its ranks, and a
    second stop signal during that wait kills them at once."""
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    original = getattr(api.PContext.close, "rig_original", api.PContext.close)

    def close(self: Any, death_sig: Any = None, timeout: int = 30) -> None:
        with second_stop_kills(self):
            original(self, death_sig, max(timeout, grace_s))
        _record_exit_codes(self)

    close.rig_original = original  # type: ignore[attr-defined]
    api.PContext.close = close


def stop_exit_code(signum: int, rank_codes: dict[int, int | None]) -> int:
    """What torchrun exits with after a stop signal: 0 when every rank finished the run."""
    if rank_codes and all(code == 0 for code in rank_codes.values()):
        return 0
    return 128 + signum


def agreed_stop(failures: dict[int, Any], rank_codes: dict[int, int | None]) -> int | None:
    """The exit code of ranks that all stopped on one agreed signal (128 + it), or None. failures:
    torch's, which lists the first rank that failed; rank_codes: every rank's, where known, except
    those torchrun killed itself once that rank had failed (its closing signal: a negative code)."""
    codes = {int(getattr(f, "exitcode", -1)) for f in failures.values()}
    codes |= {c for c in rank_codes.values() if c is not None and c >= 0}
    return codes.pop() if len(codes) == 1 and codes <= STOP_CODES else None


def main() -> int:
    log.setup()
    try:
        grace = ddp.stop_grace(os.environ)
    except RigError as e:
        print(f"ERROR torchrun: {e}", file=sys.stderr)
        return 2
    install(grace)
    api: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.api")
    errors: Any = importlib.import_module("torch.distributed.elastic.multiprocessing.errors")
    node = metrics.serve_node(os.environ, launcher=True)  # rig train's: this node's /metrics
    run: Any = importlib.import_module("torch.distributed.run")
    try:
        run.main()
    except api.SignalException as e:
        code = stop_exit_code(int(e.sigval), _EXIT_CODES)
        codes = ", ".join(f"{r}: {c}" for r, c in sorted(_EXIT_CODES.items()))
        _logger.info("signal %d: the ranks exited (local rank: code) %s; exit %d", int(e.sigval), codes, code)
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
