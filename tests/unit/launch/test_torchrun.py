"""rig's torchrun: what it exits with after a stop (the image tests stop real ranks through it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rig.launch import torchrun

from tests.helpers.waiting import wait_until


def test_a_stop_exits_128_plus_the_signal_unless_the_ranks_had_finished() -> None:
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 143, 1: 143}) == 143
    # Killed by a second Ctrl-C: what the user asked for.
    assert torchrun.stop_exit_code(signal.SIGINT, {0: -9, 1: -9}, killed_on_request=True) == 130
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 0, 1: 0}) == 0  # the run was finished
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 0, 1: 143}) == 143
    assert torchrun.stop_exit_code(signal.SIGHUP, {}) == 129
    # A rank the signal itself ended before it could take it (still starting): nothing was lost.
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: -15, 1: 143}) == 143


def test_a_crash_during_a_stop_is_never_reported_as_a_clean_stop() -> None:
    """A scheduler requeues a job that exited 128 + its stop signal: a crashed rank (a DataLoader
    worker killed under it, a save that failed) must not look like that, nor a rank still running at
    the deadline (killed: its work since the last checkpoint is lost)."""
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 1, 1: 1}) == 1
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 143, 1: 1}) == 1
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 143, 1: -9}) == 137
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: -11, 1: 143}) == 1  # a segfault
    assert torchrun.stop_exit_code(signal.SIGINT, {0: None}) == 1
    assert torchrun.unclean({0: 143, 1: 1, 2: -9}) == [
        "rank 1 exited 1 (a crash: see its error above)",
        "rank 2 was killed at the stop deadline (RIG_STOP_GRACE)",
    ]


def test_ranks_that_all_stopped_on_one_signal_are_a_stop_not_a_failure() -> None:
    def failures(*codes: int) -> dict[int, SimpleNamespace]:
        return {rank: SimpleNamespace(exitcode=code) for rank, code in enumerate(codes)}

    assert torchrun.agreed_stop(failures(143, 143), {0: 143, 1: 143}) == 143
    assert torchrun.agreed_stop(failures(130), {}) == 130
    assert torchrun.agreed_stop(failures(143, 1), {}) is None  # one rank failed: torch's own report
    assert torchrun.agreed_stop(failures(1), {}) is None
    assert torchrun.agreed_stop(failures(-9), {}) is None
    # Rank 1 stopped first; torchrun's closing SIGTERM ended rank 0 while it was stopping too.
    assert torchrun.agreed_stop({1: SimpleNamespace(exitcode=143)}, {0: -15, 1: 143}) == 143
    # Only rank 1 stopped, rank 0 finished as if nothing happened: not an agreed stop.
    assert torchrun.agreed_stop({1: SimpleNamespace(exitcode=143)}, {0: 0, 1: 143}) is None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_rank_that_died_alone_takes_its_process_group_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real rank leading its session, with a child of its own (as inductor's g++ or worker pool), is
    SIGKILLed alone (the OOM killer); torch's close signals only ranks still running, so it skips it:
    rig's close kills what is left of the dead rank's group."""

    class PContext:  # torch's close: the group of each rank still running; an exited rank is skipped
        def __init__(self, proc: subprocess.Popen[bytes]) -> None:
            self.proc = proc
            self.subprocess_handlers = {0: SimpleNamespace(proc=proc)}

        def pids(self) -> dict[int, int]:
            return {0: self.proc.pid}

        def close(self, death_sig: Any = None, timeout: int = 30) -> None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    api = types.ModuleType("torch.distributed.elastic.multiprocessing.api")
    api.PContext = PContext  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, api.__name__, api)
    torchrun.install(1)
    child = tmp_path / "child"
    rank = subprocess.Popen(["sh", "-c", f"sleep 300 & echo $! > {child}; wait"], start_new_session=True)
    wait_until(lambda: child.read_text().strip() if child.exists() else "")
    worker = int(child.read_text())
    try:
        rank.kill()  # the rank alone
        rank.wait()
        api.PContext(rank).close()
        wait_until(lambda: not _alive(worker), timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
