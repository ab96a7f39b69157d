# mypy: disable-error-code="safe-super"
# (Seeded's base is contract.Dataset, a Protocol, for the type check only.)
"""The random draws of training, made so that an epoch resumed at any batch draws what the
uninterrupted epoch would have drawn. The one place that says how.

- The order of an epoch: torch's DistributedSampler with the run's seed and that epoch's number
  (`EpochSampler`). Ultralytics' persistent loader asks for the next epoch's order while the epoch
  before is still running, under the old number; here each pass of the sampler is numbered itself.
- Each sample's augmentation, in the loader workers: the sampler hands the dataset `Key(seed,
  epoch, index)` instead of the bare index, and the dataset seeds Python's `random`, NumPy's global
  generator and torch's from that key just before Ultralytics' own `__getitem__` (`seeded`). Every
  draw Ultralytics' transforms make (mosaic's partners and placement, the affine, HSV gains, flips,
  mixup), and any made in the workers for steps finished on the device, depends on the sample alone:
  not on which worker loaded it, nor on what that worker loaded before.
- The rank's own draws in a training step (multi-scale's size, anything drawn on the device): seeded
  from (seed, rank, epoch, batch) at the start of each batch (`seed_batch`).
So nothing random needs to be saved in a checkpoint: the epoch and the batch say it all.

One difference stays with `cache` off (or disk): mosaic picks its partners among the images its
worker loaded last (Ultralytics' buffer: min(images, 8 x the rank's batch, 1000) of them, from
that worker's own batches, which the loader hands out to its workers in turn). The draws are the
same, the buffer they index is not always: after a resume each worker's buffer starts empty (other
partners until it is full again, about 8 of its batches); with another number of workers every
buffer holds other batches' images (other partners until mosaic closes). With `cache=ram`
(partners from the whole dataset) or `mosaic=0` the resumed epoch is the uninterrupted one exactly.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from rig.yolo import contract, ultra

PREFIX = "Seeded"
# Separate streams for the workers' samples and the ranks' batches, however the numbers coincide.
_SAMPLE, _BATCH = 0x5A4D, 0xBA7C


class Key(NamedTuple):
    """What the training sampler yields in place of an index: whose draws the sample makes."""

    seed: int
    epoch: int
    image: int  # the dataset index


def _seed(*entropy: int) -> int:
    """A 64-bit seed from the numbers (BLAKE2b: well mixed, microseconds, the same in every process)."""
    return int.from_bytes(hashlib.blake2b(repr(entropy).encode(), digest_size=8).digest(), "little")


@functools.cache
def _libraries() -> tuple[Any, Any]:
    return importlib.import_module("numpy"), importlib.import_module("torch")


def _seed_host(seed: int) -> None:
    """Python's `random`, NumPy's global generator and torch's CPU generator: what a worker draws from."""
    np, torch = _libraries()
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.default_generator.manual_seed(seed >> 1)


def seed_sample(key: Key) -> None:
    _seed_host(_seed(_SAMPLE, key.seed, key.epoch, key.image))


def seed_batch(seed: int, rank: int, epoch: int, batch: int) -> None:
    """The rank's generators for one batch: the host's, and torch's on every device it has started."""
    _, torch = _libraries()
    value = _seed(_BATCH, seed, rank, epoch, batch)
    _seed_host(value)
    torch.manual_seed(value >> 1)


def takes_keys(dataset: contract.Dataset) -> bool:
    """Whether the dataset's items can be asked for by a `Key` (a `seeded` class). Ultralytics'
    classification dataset, built outside build_yolo_dataset, is not: it gets plain indices."""
    return isinstance(dataset, Seeded)


class EpochSampler:
    """The train loader's sampler: a DistributedSampler whose passes are numbered here (`epoch`, the
    epoch of the next pass), yielding `Key`s (plain indices when not `keyed`); `skip` samples of the
    next pass are left out (a resumed epoch's first batches, already trained)."""

    def __init__(self, inner: Any, seed: int, keyed: bool = True) -> None:
        self.inner = inner
        self.seed = seed
        self.keyed = keyed
        self.epoch = 0
        self.skip = 0

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[Key | int]:
        epoch, skip = self.epoch, self.skip
        self.epoch, self.skip = epoch + 1, 0
        self.inner.set_epoch(epoch)
        for index in list(iter(self.inner))[skip:]:
            yield Key(self.seed, epoch, int(index)) if self.keyed else int(index)


if TYPE_CHECKING:
    _Dataset = contract.Dataset
else:
    _Dataset = object


class Seeded(_Dataset):
    """A dataset (`seeded` puts this in front of its class) whose items asked for by a `Key` make
    their random draws from it."""

    rig_takes_keys = True

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, Key):
            seed_sample(index)
            index = index.image
        return super().__getitem__(index)


@functools.cache
def seeded(base: type) -> type:
    """base, whose items asked for by a `Key` make their random draws from it; importable by name
    from this module (a spawn-started loader worker unpickles it)."""
    name = f"{PREFIX}{base.__name__}"
    return type(name, (Seeded, base), {"__module__": __name__, "__qualname__": name})


def _named(name: str) -> Any:
    """A dataset class by the name build_yolo_dataset's wrappers give it (rig.yolo.augment.dataset,
    rig.yolo.nodecache.cached_dataset), or Ultralytics' own."""
    for module in ("rig.yolo.augment.dataset", "rig.yolo.nodecache.cached_dataset"):
        with contextlib.suppress(AttributeError):
            return getattr(importlib.import_module(module), name)
    return getattr(ultra.data_dataset(), name, None)


def __getattr__(name: str) -> Any:
    """The Seeded classes, made on first use (a spawn-started loader worker unpickles them by name)."""
    if name.startswith(PREFIX):
        base = _named(name.removeprefix(PREFIX))
        if base is not None:
            return seeded(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def in_use(mode: str, on: bool = True) -> Iterator[None]:
    """While Ultralytics builds the train dataset, the classes it instantiates are seeded ones.
    Entered by rig.yolo.augment.building, inside the other wrappers: it wraps whatever class is
    there. `on` False: Ultralytics' own classes (exact resume is off)."""
    if mode != "train" or not on:
        yield
        return
    with ultra.datasets_built_as(seeded):
        yield
