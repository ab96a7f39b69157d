"""The train loader's workers and the stop signals: none is lost while workers are forked (the
workers' fate under a real signal is the image tests')."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from rig.yolo import trainloader


def _blocked() -> set[int]:
    return set(signal.pthread_sigmask(signal.SIG_BLOCK, []))


class _Loader:
    """Ultralytics' InfiniteDataLoader as RigLoader overrides it: `_get_iterator` forks the workers."""

    def _get_iterator(self) -> set[int]:
        return _blocked()  # the mask the workers are forked under, and inherit


@pytest.fixture
def hangups() -> Iterator[list[int]]:
    got: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    kept = signal.signal(signal.SIGHUP, record)
    try:
        yield got
    finally:
        signal.signal(signal.SIGHUP, kept)


def test_the_workers_are_forked_with_the_stop_signals_blocked_and_the_mask_is_put_back() -> None:
    loader: Any = object.__new__(trainloader.loader_class(_Loader))  # no torch: only the fork is checked
    before = _blocked()
    forked_under = loader._get_iterator()
    assert set(trainloader.STOP_SIGNALS) <= forked_under
    assert _blocked() == before


def test_a_stop_signal_that_comes_while_workers_fork_reaches_the_rank_after(hangups: list[int]) -> None:
    """The signal sent to the thread that forks (its mask is what a worker inherits): held back while
    it forks, handled once it is done. (Sent to the process, another thread of it, such as pytest-xdist's
    own, may take it at once: the workers are safe either way, they are forked under the mask.)"""
    with trainloader._forking():
        signal.pthread_kill(threading.get_ident(), signal.SIGHUP)
        assert hangups == []  # held back: a worker forked now could not have its handler yet
    assert hangups == [signal.SIGHUP]
