# mypy: disable-error-code="safe-super"
# (RigLoader's base is contract.Loader, a Protocol, for the type check only: its super() calls reach
# Ultralytics' InfiniteDataLoader at run time.)
"""The trainer's loaders: workers that outlive a stop signal, and a train loader that can start an
epoch at any batch.

Workers: a stop signal aimed at the rank's process group (torchrun's forwarding, the workstation's
`killpg`, `scancel --signal=TERM`, which signals every process of the step) would kill torch's
DataLoader workers, and the rank would raise "DataLoader worker ... is killed by signal" inside its
next batch, before it can save. Here the workers ignore TERM, INT and HUP (they are blocked while a
worker is forked, so none is lost in between): the rank gets the signal, stops at a batch boundary,
saves, and shuts its workers down itself (`close`, then SIGKILL for any that will not go). A worker
still dies with its rank: torch's workers watch their parent, and a SIGKILL reaches the whole group.

Position: Ultralytics' InfiniteDataLoader keeps one iterator over all epochs. Here each pass is an
epoch of its own, numbered and ordered by rig.yolo.draws.EpochSampler, and `begin_epoch(epoch,
done)` makes the coming epoch yield only its batches from `done` on (`len` stays the whole epoch's,
which Ultralytics' schedule counts with).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import signal
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from rig.yolo import contract, draws, ultra

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def ignore_stop_signals(worker_init: Callable[[int], None] | None) -> Callable[[int], None]:
    """A worker_init_fn that makes the worker ignore the stop signals, then runs worker_init."""
    return functools.partial(_init_worker, worker_init)


def _init_worker(worker_init: Callable[[int], None] | None, worker_id: int) -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked while forked: see _forking
    if worker_init is not None:
        worker_init(worker_id)


@contextlib.contextmanager
def _forking() -> Iterator[None]:
    """The stop signals held back while workers are forked: a worker inherits the block and unblocks
    once it ignores them; the rank gets any that came meanwhile when it unblocks here."""
    kept = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, kept)


def workers_of(loader: contract.Loader) -> list[Any]:
    return list(getattr(getattr(loader, "iterator", None), "_workers", None) or [])


# The loaders whose workers may be alive. A process that exits without closing them (an error in
# training) would hang: multiprocessing's exit terminates its daemon children with SIGTERM, which
# these ignore, then waits for them. This exit handler, registered after multiprocessing's and
# torch's (so it runs before them), closes them first.
_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def _close_all() -> None:
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader.close()


def _track(loader: RigLoader) -> None:
    if not _LIVE:
        atexit.unregister(_close_all)
        atexit.register(_close_all)
    _LIVE.add(loader)


if TYPE_CHECKING:
    _Base = contract.Loader
else:
    _Base = object


class RigLoader(_Base):
    """Ultralytics' InfiniteDataLoader (`loader_class` puts this in front of it) with stop-proof
    workers and, for a shuffled DistributedSampler (the train loader under torchrun), numbered
    epochs that can start mid-way."""

    rig_epochs: draws.EpochSampler | None = None
    rig_batches = -1  # batches the coming epoch yields; -1: len(self)
    rig_epoch = 0  # the epoch under way, and the batches of it trained before this process
    rig_done = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.worker_init_fn: Any = ignore_stop_signals(self.worker_init_fn)
        _track(self)
        batches = self.batch_sampler.sampler  # _RepeatSampler's BatchSampler
        shuffled = _shuffled(getattr(batches, "sampler", None), self.dataset)
        if shuffled is not None and _SEED:
            shuffled.seed = _SEED[-1]
            self.rig_epochs = draws.EpochSampler(shuffled, _SEED[-1], draws.takes_keys(self.dataset))
            batches.sampler = self.rig_epochs
            if self.iterator is not None:
                # Ultralytics releases before 8.4.158 make the iterator (and fork the workers) at
                # construction, before rig's sampler is in place: that one's order is not rig's.
                self._rig_restart()

    def _rig_restart(self) -> None:
        """The iterator made again at once, as such a release expects, over rig's sampler."""
        old: Any = self.iterator
        shutdown = getattr(old, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        self._rig_position()
        self.iterator: Any = self._get_iterator()

    def _rig_position(self) -> None:
        """The sampler's next pass: the epoch under way, from its first batch not yet trained. Set
        before an iterator is made: making one (in releases that do so at once) starts the pass."""
        if self.rig_epochs is not None:
            self.rig_epochs.epoch, self.rig_epochs.skip = self.rig_epoch, self.rig_done * self.batch_size

    def _get_iterator(self) -> Any:
        with _forking():
            return super()._get_iterator()  # type: ignore[misc]

    def begin_epoch(self, epoch: int, done: int = 0) -> None:
        """The coming epoch is `epoch`, its first `done` batches already trained."""
        self.rig_epoch, self.rig_done = epoch, done
        self.rig_batches = len(self) - done
        sampler = self.rig_epochs
        if sampler is None:
            return
        if self.iterator is None:
            sampler.epoch, sampler.skip = epoch, done * self.batch_size
        elif done or sampler.epoch not in (epoch, epoch + 1):
            self.reset()  # a pass of another epoch is in flight (or prefetched): start this one
        # else: this epoch's pass is the next one, or the one the workers already prefetch

    def reset(self) -> None:
        # Ultralytics resets to rebuild the workers' transforms (close_mosaic) at an epoch's start:
        # the new iterator runs the same epoch from the same batch.
        self._rig_position()
        super().reset()

    def __iter__(self) -> Iterator[Any]:
        if self.rig_batches < 0:
            yield from super().__iter__()
            return
        batches, self.rig_batches = self.rig_batches, -1
        if self.iterator is None:
            self.iterator = self._get_iterator()
        for _ in range(batches):
            yield next(self.iterator)

    def close(self) -> None:
        workers = workers_of(self)
        super().close()
        for w in workers:  # they ignore torch's terminate() (SIGTERM)
            if w.is_alive():
                w.kill()
                w.join(5)


@functools.cache
def loader_class(base: type) -> type[RigLoader]:
    """RigLoader in front of base (Ultralytics' InfiniteDataLoader)."""
    made = type(f"Rig{base.__name__}", (RigLoader, base), {})
    return cast("type[RigLoader]", made)


def _shuffled(sampler: Any, dataset: contract.Dataset) -> Any:
    """The train loader's shuffling sampler as a DistributedSampler: torch's own under torchrun; in
    place of the RandomSampler of a single process (the CPU rank of `rig train device=cpu`), one of
    one replica. None for a loader that does not shuffle (validation)."""
    data: Any = importlib.import_module("torch.utils.data")
    if isinstance(sampler, data.DistributedSampler):
        return sampler if sampler.shuffle else None
    if isinstance(sampler, data.RandomSampler):
        return data.DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True)
    return None


_SEED: list[int] = []  # the run's seed while in_use builds a loader


@contextlib.contextmanager
def in_use(seed: int) -> Iterator[None]:
    """While Ultralytics builds a loader (build_dataloader), it builds rig's, shuffling with seed."""
    build = ultra.data_build()
    _SEED.append(seed)
    try:
        with ultra.swapped(
            contract.DataBuild, build, InfiniteDataLoader=loader_class(build.InfiniteDataLoader)
        ):
            yield
    finally:
        _SEED.pop()
