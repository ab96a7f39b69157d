"""The supervisor: pure transitions, then real child processes with signals injected into its queue."""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import time
from pathlib import Path

import pytest
from rig.workstation import services
from rig.workstation.supervisor import Policy, State, Status, Supervisor, after_exit, classify, listening

from tests.helpers.waiting import wait_until

# ---- supervisor: pure transitions ----------------------------------------------------------------
POLICY = Policy(max_failures=3, backoff_base=1, backoff_cap=3, stable_after=60)


def test_backoff_grows_then_fatal() -> None:
    s = Status(State.STARTING, since=0)
    s = after_exit(s, 1, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 1, 2)
    s = after_exit(Status(State.STARTING, 2, s.failures), 3, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 2, 5)
    s = after_exit(Status(State.STARTING, 5, s.failures), 6, POLICY)
    assert (s.state, s.failures) == (State.FATAL, 3)


def test_a_stable_run_resets_the_failure_count() -> None:
    s = after_exit(Status(State.RUNNING, since=0, failures=2), 61, POLICY)
    assert (s.state, s.failures, s.retry_at) == (State.BACKOFF, 1, 62)
    s = after_exit(Status(State.RUNNING, since=0, failures=2), 30, POLICY)
    assert s.state is State.FATAL


@pytest.mark.parametrize(
    ("line", "level", "text"),
    [
        (
            "[I 2026-11-29 14:00:00.123 ServerApp] Jupyter Server is running",
            logging.INFO,
            "ServerApp: Jupyter",
        ),
        ("[W 2026-11-29 14:00:00.123 LabApp] Could not determine", logging.WARNING, "LabApp: Could not"),
        ("[E 2026-11-29 14:00:00.123 ServerApp] 500 GET /api", logging.ERROR, "ServerApp: 500 GET"),
        ("W1129 14:00:00.123456 140 plugin.py:12] no data", logging.WARNING, "no data"),
        ("error: Bind to port 2222 on 0.0.0.0 failed", logging.ERROR, "error: Bind"),
        ("fatal: Cannot bind any address.", logging.ERROR, "fatal: Cannot"),
        ("Server listening on 0.0.0.0 port 2222.", logging.INFO, "Server listening"),
        ("/x.py:3: DeprecationWarning: old", logging.WARNING, "/x.py:3"),
        ("Traceback (most recent call last):", logging.ERROR, "Traceback"),
    ],
)
def test_classify_service_lines(line: str, level: int, text: str) -> None:
    got_level, got_text = classify(line)
    assert got_level == level
    assert got_text.startswith(text)


def test_listening_reads_proc_net_tcp(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue\n"
    (tmp_path / "net/tcp").write_text(
        header
        + "   0: 00000000:08AE 00000000:0000 0A 00000000:00000000\n"  # 2222 LISTEN
        + "   1: 0100007F:22B8 0100007F:A1B2 01 00000000:00000000\n"  # 8888 ESTABLISHED only
    )
    (tmp_path / "net/tcp6").write_text(header + "   0: 00000000000000000000000000000000:1776 0:0 0A 0:0\n")
    assert listening(2222, tmp_path)
    assert not listening(8888, tmp_path)
    assert listening(6006, tmp_path)
    assert not listening(2222, tmp_path / "missing")


# ---- supervisor: real child processes, signals injected into its queue ---------------------------
def _spec(name: str, code: str, port: int) -> services.ServiceSpec:
    return services.ServiceSpec(name, (sys.executable, "-c", code), port, dict(os.environ), None, Path("/"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (the test process is not its parent).
    return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def _run_in_thread(sup: Supervisor) -> tuple[list[int], object]:
    import threading

    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(sup.run()), daemon=True)
    thread.start()
    return result, thread


def test_crash_restarts_only_that_service_then_fatal_and_term_stops_cleanly(tmp_path: Path) -> None:
    events: queue.SimpleQueue[int] = queue.SimpleQueue()
    policy = Policy(max_failures=3, backoff_base=0.2, backoff_cap=0.4, stop_timeout=5)
    specs = [_spec("steady", "import time; time.sleep(60)", 1), _spec("crashy", "raise SystemExit(3)", 2)]
    sup = Supervisor(
        specs, events=events, policy=policy, state_file=tmp_path / "s.json", probe=lambda p: p == 1
    )
    result, thread = _run_in_thread(sup)
    wait_until(lambda: sup.status["crashy"].state is State.FATAL, timeout=15, interval=0.05)
    assert sup.status["crashy"].failures == 3
    assert sup.status["steady"].state is State.RUNNING
    steady_pid = sup.procs["steady"].pid
    assert '"fatal"' in (tmp_path / "s.json").read_text()
    events.put(signal.SIGTERM)
    thread.join(timeout=10)  # type: ignore[attr-defined]
    assert result == [0]
    assert not _alive(steady_pid)
    assert sup.status["steady"].state is State.STOPPED


def test_term_then_kill_after_the_deadline() -> None:
    events: queue.SimpleQueue[int] = queue.SimpleQueue()
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    sup = Supervisor(
        [_spec("stubborn", stubborn, 1)], events=events, policy=Policy(stop_timeout=1), probe=lambda p: True
    )
    result, thread = _run_in_thread(sup)
    wait_until(lambda: sup.status["stubborn"].state is State.RUNNING, timeout=15, interval=0.05)
    time.sleep(0.3)  # let it install its SIG_IGN
    pid = sup.procs["stubborn"].pid
    started = time.monotonic()
    events.put(signal.SIGTERM)
    thread.join(timeout=10)  # type: ignore[attr-defined]
    assert result == [0]
    assert 1 <= time.monotonic() - started < 5
    assert not _alive(pid)


def test_every_service_fatal_exits_non_zero() -> None:
    sup = Supervisor(
        [_spec("bad", "raise SystemExit(1)", 1)], policy=Policy(max_failures=2, backoff_base=0.1)
    )
    assert sup.run() == 1
