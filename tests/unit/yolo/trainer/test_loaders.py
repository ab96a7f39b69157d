"""The train loader's batches as Ultralytics' loop numbers them."""

from __future__ import annotations

from rig.yolo.trainer import loaders


def test_a_resumed_epoch_is_numbered_from_its_offset_once() -> None:
    ends: list[int] = []
    batches = loaders.Batches(finished=lambda: ends.append(batches.current))
    batches.offset = 3
    seen = list(batches.enumerate(["d", "e"]))  # the loader already starts at batch 3 (trainloader)
    assert seen == [(3, "d"), (4, "e")] and batches.current == 4 and ends == [4]
    assert list(batches.enumerate("ab")) == [(0, "a"), (1, "b")]  # the next epoch from 0
    assert batches.offset == 0 and len(ends) == 2


def test_only_the_train_loader_is_numbered_by_the_batches() -> None:
    train, other = ["t0", "t1"], ["v0"]
    batches = loaders.Batches(finished=lambda: None)
    batches.offset = 5
    numbered = loaders.enumerate_for(lambda: train, batches)
    assert list(numbered(other, 1)) == [(1, "v0")] and batches.offset == 5
    assert list(numbered(train)) == [(5, "t0"), (6, "t1")]


def test_an_epoch_with_no_batch_left_still_finishes() -> None:
    """A stop during validation: the resumed epoch has no batch; its pending state goes back anyway."""
    ends: list[str] = []
    batches = loaders.Batches(finished=lambda: ends.append("put back"))
    assert list(batches.enumerate([])) == [] and ends == ["put back"]
