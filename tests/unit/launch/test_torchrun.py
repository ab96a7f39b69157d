"""rig's torchrun: what it exits with after a stop (the image tests stop real ranks through it)."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from rig.launch import torchrun


def test_a_stop_exits_128_plus_the_signal_unless_the_ranks_had_finished() -> None:
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 143, 1: 143}) == 143
    assert torchrun.stop_exit_code(signal.SIGINT, {0: -9, 1: -9}) == 130  # killed by a second Ctrl-C
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 0, 1: 0}) == 0  # the run was finished
    assert torchrun.stop_exit_code(signal.SIGTERM, {0: 0, 1: 143}) == 143
    assert torchrun.stop_exit_code(signal.SIGHUP, {}) == 129


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
