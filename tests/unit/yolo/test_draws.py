"""The random-draw scheme's bookkeeping on the host: numbered passes, skipped batches, keyed items.
The image tests prove the draws themselves (a resumed epoch equal, bit for bit, to the uninterrupted one)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from rig.yolo import draws


class _Sampler:
    """torch's DistributedSampler as EpochSampler uses it: an order that follows set_epoch."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter([(i * (self.epoch + 3)) % self.n for i in range(self.n)])


def test_each_pass_is_numbered_by_the_sampler_not_by_set_epoch() -> None:
    """Ultralytics' persistent iterator starts the next pass while the epoch before still runs, before
    its set_epoch: each pass takes the next number itself."""
    inner = _Sampler(5)
    sampler = draws.EpochSampler(inner, seed=7)
    sampler.epoch = 2
    first = list(sampler)
    inner.set_epoch(0)  # what Ultralytics' late set_epoch would do: no effect on the next pass
    second = list(sampler)
    assert [k.epoch for k in first] == [2] * 5 and [k.epoch for k in second] == [3] * 5
    assert [k.image for k in first] == [(i * 5) % 5 for i in range(5)]
    assert [k.image for k in second] == [(i * 6) % 5 for i in range(5)]
    assert {k.seed for k in first + second} == {7}
    assert len(sampler) == 5


def test_a_resumed_pass_skips_what_was_trained_once() -> None:
    sampler = draws.EpochSampler(_Sampler(6), seed=0)
    whole = list(sampler)
    sampler.epoch, sampler.skip = 0, 4
    assert list(sampler) == whole[4:]
    assert len(list(sampler)) == 6  # the next pass (epoch 2) is whole again


def test_a_keyed_item_is_seeded_from_its_key_a_plain_index_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    seeded: list[draws.Key] = []
    monkeypatch.setattr(draws, "seed_sample", seeded.append)

    class Base:
        def __getitem__(self, index: int) -> int:
            return index * 10

    cls = draws.seeded(Base)
    assert cls.__name__ == "SeededBase" and draws.seeded(Base) is cls
    assert cls()[draws.Key(1, 2, 3)] == 30 and seeded == [draws.Key(1, 2, 3)]
    assert cls()[4] == 40 and len(seeded) == 1


def test_a_dataset_that_takes_no_keys_gets_plain_indices_in_the_same_order() -> None:
    """Ultralytics' classification dataset is not a seeded one: its sampler yields the bare indices."""

    class Base:
        pass

    assert draws.takes_keys(draws.seeded(Base)()) and not draws.takes_keys(Base())
    keyed, plain = (
        draws.EpochSampler(_Sampler(5), seed=3),
        draws.EpochSampler(_Sampler(5), seed=3, keyed=False),
    )
    plain.skip = 2
    assert list(plain) == [k.image for k in list(keyed)[2:]]
    assert all(type(i) is int for i in plain)


def test_every_draw_is_seeded_from_the_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample's draws and a batch's differ from one epoch to the next (mosaic's partners, the
    affine, multi-scale's size), and are the same for the same epoch: a resumed one."""
    seeds: list[int] = []
    monkeypatch.setattr(draws, "_seed_host", seeds.append)
    monkeypatch.setattr(draws, "_libraries", lambda: (None, SimpleNamespace(manual_seed=lambda _s: None)))
    for epoch in (1, 2, 1):
        draws.seed_sample(draws.Key(seed=0, epoch=epoch, image=5))
        draws.seed_batch(0, 0, epoch, 3)
    sample, batch = seeds[0::2], seeds[1::2]
    assert sample[0] != sample[1] and sample[0] == sample[2]
    assert batch[0] != batch[1] and batch[0] == batch[2]
    assert len(set(sample) | set(batch)) == 4  # the workers' and the ranks' streams apart
