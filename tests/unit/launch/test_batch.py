"""The batch of a `rig train` (rig.launch.batch), decided in one place: the check of batch= over the
world, the total rig gives the trainer and why, and each rank's share that the loader's /dev/shm and
the step levers' record read (they never parse batch= again)."""

from __future__ import annotations

import logging

import pytest
from rig.errors import RigError
from rig.launch import batch
from rig.spelling import Spelling
from rig.yolo import ultra
from rig.yolo.gpubatch import GpuMemory

GIB = 1 << 30


def _decide(
    args: dict[str, str], world: int, default: float = 16, gpus: batch.Gpus | None = None
) -> batch.Batch:
    return batch.decide(
        args, world=world, default=default, default_nbs=64, gpus=gpus, typed=ultra._plain_value
    )


@pytest.mark.parametrize(
    ("given", "world", "message"),
    [
        ("x", 2, "batch=x: not a number; give the total batch over all ranks"),
        ("-1", 2, "batch=-1: AutoBatch works on one GPU only; give a total batch divisible by the 2 ranks"),
        ("0.7", 4, "batch=0.7: AutoBatch works on one GPU only"),
        ("16", 3, "batch=16: not divisible by the 3 ranks; use a multiple of 3, e.g. 15 or 18"),
        ("2", 4, "batch=2: not divisible by the 4 ranks; use a multiple of 4, e.g. 4 or 8"),
    ],
)
def test_a_batch_that_does_not_split_over_the_world_names_the_option(
    given: str, world: int, message: str
) -> None:
    with pytest.raises(RigError) as caught:
        batch.check({"batch": given}, world)
    assert str(caught.value) == caught.value.line() and str(caught.value).startswith(message)
    # The option is spelled once, by whoever prints it: make's variable under `make train`.
    assert caught.value.line(Spelling(from_make=True)).startswith(f"BATCH={given}: ")
    if given == "x":  # not a number on one rank either: Ultralytics would fail in the trainer
        with pytest.raises(RigError, match=r"^batch=x: not a number"):
            batch.check({"batch": given}, 1)
    else:
        batch.check({"batch": given}, 1)  # one rank: Ultralytics' own rules (AutoBatch too)


def test_a_good_batch_passes() -> None:
    batch.check({"batch": "48"}, 3)
    batch.check({}, 8)


@pytest.mark.parametrize(
    ("args", "world", "expected"),
    [
        ({}, 1, None),
        ({}, 3, 48),  # Ultralytics alone: 16 // 3 = 5 per GPU, 15 in all
        ({}, 24, 384),  # Ultralytics alone: 16 // 24 = 0, a crash
        ({"batch": "64"}, 8, None),
        ({"resume": "True"}, 8, None),
    ],
)
def test_default_batch_is_per_gpu_times_the_world(
    args: dict[str, str], world: int, expected: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rig")
    got = _decide(args, world)
    assert got.total == expected
    if expected:
        assert got.reason and f"16 per GPU x {world} GPUs" in got.reason
        assert caplog.messages == [f"batch={expected}: {got.reason}"]  # the one line
    else:
        assert got.reason is None and not caplog.messages
    assert batch.applied(args, got).get("batch") == (str(expected) if expected else args.get("batch"))


def test_an_autobatch_default_under_ddp_asks_for_a_batch() -> None:
    with pytest.raises(RigError, match=r"give a total batch for the 2 ranks, e\.g\. batch=32"):
        _decide({}, 2, default=-1)


@pytest.mark.parametrize(
    ("args", "world", "per_rank", "whole"),
    [
        ({}, 1, 16, True),  # one rank: Ultralytics' default, as the trainer gets it
        ({}, 4, 16, True),  # rig's total: the default per GPU
        ({"batch": "32"}, 4, 8, True),  # Ultralytics splits the total over every rank of every node
        ({"batch": "32.0"}, 4, 8, True),
        ({"batch": "2"}, 4, 1, True),  # never below one image
        ({"batch": "16.5"}, 1, 16, False),  # not a batch rig bench measures
        ({"batch": "-1"}, 1, batch.AUTOBATCH_ASSUMED, False),  # AutoBatch: /dev/shm for a large one
        ({"batch": "0.7"}, 1, batch.AUTOBATCH_ASSUMED, False),
        ({"resume": "True"}, 8, 2, False),  # the checkpoint's batch, unknown: the default's share
        ({"resume": "True", "batch": "32"}, 8, 4, False),
    ],
)
def test_each_rank_s_share_is_read_from_the_decision(
    args: dict[str, str], world: int, per_rank: int, whole: bool
) -> None:
    got = _decide(args, world)
    assert (got.per_rank, got.whole) == (per_rank, whole)
    assert batch.share(16, world).per_rank == max(16 // world, 1)


def test_on_gpus_the_batch_is_their_memory_s_and_its_reason_the_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rig")
    h100 = GpuMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 80 * GIB)
    got = _decide({"model": "yolo11n.pt"}, 2, gpus=batch.Gpus([h100, h100], "ok", 80))
    assert (got.total, got.per_rank, got.whole) == (64, 32, True)
    assert got.reason and got.reason.startswith("NVIDIA H100 80GB HBM3 has 80.0 GiB free; yolo11n at 640 px")
    assert caplog.messages == [f"batch=64: {got.reason}"]
    caplog.clear()
    unread = _decide({"model": "yolo11n.pt"}, 2, gpus=batch.Gpus([], "NVML unavailable (no driver)", 80))
    assert (unread.total, unread.per_rank) == (32, 16)  # Ultralytics' default per GPU, and why not more
    assert caplog.messages[0] == (
        "batch from the GPUs' memory: Ultralytics' default 16 per GPU: no GPU memory reading "
        "(NVML unavailable (no driver))"
    )
    assert caplog.messages[1] == f"batch=32: {unread.reason}"
    given = _decide({"model": "yolo11n.pt", "batch": "8"}, 2, gpus=batch.Gpus([h100, h100], "ok", 80))
    assert (given.total, given.per_rank, given.reason) == (None, 4, None)  # the user's, as given
