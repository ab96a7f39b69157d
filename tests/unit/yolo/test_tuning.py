"""Launch-time `workers` and `cache` decisions on tables of RAM, /dev/shm and CPU sizes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rig.launch import batch
from rig.yolo.tuning import (
    Decision,
    Node,
    Resources,
    classify_full_size,
    decide,
    decide_for,
    node_cache_free,
    read_resources,
    size_dataset,
)

from tests.helpers.datasets import make_dataset

GIB = 1 << 30
MIB = 1 << 20
BATCH_640 = 16 * 3 * 640 * 640  # one batch of 16 at 640 px, uint8


def values(decisions: list[Decision]) -> dict[str, str]:
    return {d.key: d.value for d in decisions}


@pytest.mark.parametrize(
    ("rank_cpus", "nranks", "shm", "expected_workers"),
    [
        (2, 1, 8 * GIB, "2"),  # the CI box: both cores
        (16, 1, 64 * GIB, "16"),  # not capped at Ultralytics' 8
        (12, 8, 64 * GIB, "12"),  # per-rank batch 2: 12 workers x 8 ranks fit
        (1, 1, 8 * GIB, "1"),
        (0, 1, 8 * GIB, "1"),  # an empty cpuset still gets a worker
        (8, 1, 64 * MIB, "0"),  # Docker's default /dev/shm: not even one worker's batches
        (8, 1, 12 * BATCH_640 * 3, "3"),  # shm room for exactly three workers
        (8, 2, 12 * BATCH_640 * 3, "3"),  # two ranks: half the batch each, twice the ranks
    ],
)
def test_workers_from_cpus_and_shm(rank_cpus: int, nranks: int, shm: int, expected_workers: str) -> None:
    got = decide(
        rank_batch=batch.share(16, nranks).per_rank,  # one node: its ranks share 16
        user_args={},
        train_images=100,
        resources=Resources(mem_available=64 * GIB, shm_free=shm),
        rank_cpus=rank_cpus,
        nranks=nranks,
    )
    assert values(got)["workers"] == expected_workers


@pytest.mark.parametrize(
    ("nranks", "world", "shm", "expected_workers"),
    [
        (2, None, 12 * BATCH_640 * 3, "3"),  # one node: the world is its ranks
        (2, 2, 12 * BATCH_640 * 3, "3"),
        # Two nodes of 2 ranks: Ultralytics gives each rank 16/4 images, a quarter of the batch,
        # so each worker's batches take half the /dev/shm of the one-node case.
        (2, 4, 12 * BATCH_640 * 3, "6"),
        (1, 8, 12 * BATCH_640, "8"),  # 8 nodes of 1 rank: batch 2 per rank, CPUs are the limit
    ],
)
def test_workers_follow_the_global_world_size(
    nranks: int, world: int | None, shm: int, expected_workers: str
) -> None:
    got = decide(
        rank_batch=batch.share(16, world or nranks).per_rank,  # rig.launch.batch: each rank's share
        user_args={},
        train_images=100,
        resources=Resources(mem_available=64 * GIB, shm_free=shm),
        rank_cpus=8,
        nranks=nranks,
    )
    assert values(got)["workers"] == expected_workers


def test_workers_zero_says_how_big_shm_must_be() -> None:
    (w, _) = decide(
        rank_batch=16,
        user_args={},
        train_images=100,
        resources=Resources(mem_available=64 * GIB, shm_free=64 * MIB),
        rank_cpus=4,
        nranks=1,
    )
    assert w.value == "0"
    assert "--shm-size=" in w.reason and "/dev/shm" in w.reason


@pytest.mark.parametrize(
    ("images", "imgsz", "nranks", "mem", "expected_cache"),
    [
        (64, "640", 1, 24 * GIB, "ram"),
        (10_000, "640", 1, 24 * GIB, "ram"),  # 22.9 GiB with margin: just fits
        (10_000, "640", 1, 64 * GIB, "ram"),
        (10_000, "640", 8, 64 * GIB, "False"),  # every rank keeps its own copy
        (118_287, "640", 1, 256 * GIB, "False"),  # COCO train2017 at 640 px: ~290 GiB with margin
        (118_287, "320", 1, 256 * GIB, "ram"),
        (None, "640", 1, 24 * GIB, "ram"),  # unknown size, one rank: Ultralytics checks RAM itself
        (None, "640", 2, 24 * GIB, "False"),
    ],
)
def test_cache_from_ram(images: int | None, imgsz: str, nranks: int, mem: int, expected_cache: str) -> None:
    resources = Resources(mem_available=mem, shm_free=0)  # no shm: workers 0, so shm takes no RAM
    need = 2 * nranks * (images or 0) * 3 * int(imgsz) ** 2
    got = values(
        decide(
            rank_batch=16,
            user_args={"imgsz": imgsz},
            train_images=images,
            resources=resources,
            rank_cpus=2,
            nranks=nranks,
        )
    )
    if images is not None:  # the table row must agree with the arithmetic it documents
        assert (need <= mem) == (expected_cache == "ram"), (need / GIB, mem / GIB)
    assert got["cache"] == expected_cache


# One copy per node with the node image cache: 10,000 images at 640 px are 11.4 GiB.
NODE_FREE = 500 * GIB


@pytest.mark.parametrize(
    ("images", "nranks", "mem", "node_free", "expected_cache", "said"),
    [
        (10_000, 8, 64 * GIB, NODE_FREE, "ram", "one copy per node shared by its 8 rank(s)"),  # was False
        (10_000, 8, 12 * GIB, NODE_FREE, "ram", "11.4 GiB"),  # no 2x margin, no per-rank copies
        (10_000, 1, 11 * GIB, NODE_FREE, "False", "exceeds"),  # still has to fit in RAM
        (118_287, 8, 256 * GIB, NODE_FREE, "ram", "135.4 GiB"),  # COCO train2017 at 640 px, 8 GPUs
        (118_287, 8, 128 * GIB, NODE_FREE, "False", "exceeds"),
        (10_000, 8, 64 * GIB, 5 * GIB, "False", "only 5.0 GiB for the node image cache"),  # a copy per rank
        (10_000, 8, 64 * GIB, None, "False", "node image cache off"),
        (10_000, 2, 64 * GIB, None, "ram", "a copy per rank"),  # 2 x 2 x 11.4 GiB fits
        (None, 8, 64 * GIB, NODE_FREE, "ram", "one copy per node"),
    ],
)
def test_cache_with_the_node_image_cache(
    images: int | None, nranks: int, mem: int, node_free: int | None, expected_cache: str, said: str
) -> None:
    resources = Resources(mem_available=mem, shm_free=0, node_cache_free=node_free)
    (cache,) = [
        d
        for d in decide(
            rank_batch=16, user_args={}, train_images=images, resources=resources, rank_cpus=2, nranks=nranks
        )
        if d.key == "cache"
    ]
    assert cache.value == expected_cache
    assert said in cache.reason, cache.reason


def test_shm_in_use_counts_against_ram() -> None:
    # 1000 images at 640 px need 2.3 GiB with margin; 8 workers' batches in shm take 1.8 GiB.
    args = dict(rank_batch=16, user_args={}, train_images=1000, rank_cpus=8, nranks=1)
    fits = decide(resources=Resources(mem_available=5 * GIB, shm_free=8 * GIB), **args)  # type: ignore[arg-type]
    tight = decide(resources=Resources(mem_available=4 * GIB, shm_free=8 * GIB), **args)  # type: ignore[arg-type]
    assert values(fits)["cache"] == "ram"
    assert values(tight)["cache"] == "False"
    assert "exceeds" in tight[1].reason


def test_user_arguments_win() -> None:
    got = decide(
        rank_batch=16,
        user_args={"workers": "3", "cache": "disk"},
        train_images=10,
        resources=Resources(mem_available=64 * GIB, shm_free=64 * GIB),
        rank_cpus=16,
        nranks=1,
    )
    assert got == []


def test_user_workers_size_the_shm_for_cache() -> None:
    got = decide(
        rank_batch=16,
        user_args={"workers": "4"},
        train_images=10,
        resources=Resources(mem_available=64 * GIB, shm_free=64 * GIB),
        rank_cpus=16,
        nranks=1,
    )
    assert [d.key for d in got] == ["cache"]


def test_autobatch_sizes_shm_for_a_large_batch() -> None:
    res = Resources(mem_available=64 * GIB, shm_free=12 * BATCH_640 * 4)  # four workers at batch 16
    small = values(decide(rank_batch=16, user_args={}, train_images=1, resources=res, rank_cpus=16, nranks=1))
    rank_batch = batch.share(-1, 1).per_rank  # AutoBatch (rig.launch.batch)
    auto = values(
        decide(rank_batch=rank_batch, user_args={}, train_images=1, resources=res, rank_cpus=16, nranks=1)
    )
    assert small["workers"] == "4"
    assert auto["workers"] == "1"


def test_every_reason_is_one_line() -> None:
    for shm in (0, 64 * MIB, 64 * GIB):
        for images in (None, 5, 10**7):
            for d in decide(
                rank_batch=8,
                user_args={},
                train_images=images,
                resources=Resources(mem_available=8 * GIB, shm_free=shm),
                rank_cpus=4,
                nranks=2,
            ):
                assert d.reason and "\n" not in d.reason


# ---------------------------------------------------------------------------------------------
# Discovery on fake trees


def fake_root(tmp_path: Path, meminfo_kb: int, cgroup_max: str | None = None, current: int = 0) -> Path:
    (tmp_path / "proc").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(
        f"MemTotal:       99999999 kB\nMemFree:        1 kB\nMemAvailable:   {meminfo_kb} kB\n"
    )
    (tmp_path / "dev/shm").mkdir(parents=True)
    if cgroup_max is not None:
        cg = tmp_path / "sys/fs/cgroup"
        cg.mkdir(parents=True)
        (cg / "memory.max").write_text(cgroup_max + "\n")
        (cg / "memory.current").write_text(f"{current}\n")
    return tmp_path


@pytest.mark.parametrize(
    ("meminfo_kb", "cgroup_max", "current", "expected"),
    [
        (16 * 1024 * 1024, None, 0, 16 * GIB),
        (16 * 1024 * 1024, "max", 0, 16 * GIB),
        (16 * 1024 * 1024, str(4 * GIB), GIB, 3 * GIB),  # a container limit below the host's RAM
        (1024 * 1024, str(4 * GIB), 0, GIB),
    ],
)
def test_read_resources(
    tmp_path: Path, meminfo_kb: int, cgroup_max: str | None, current: int, expected: int
) -> None:
    res = read_resources(fake_root(tmp_path, meminfo_kb, cgroup_max, current))
    assert res.mem_available == expected
    assert res.shm_free > 0  # a real directory: statvfs of the filesystem under tmp_path


def fake_cgroup_v1(root: Path, limit: int, usage: int) -> Path:
    cg = root / "sys/fs/cgroup/memory"
    cg.mkdir(parents=True)
    (cg / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (cg / "memory.usage_in_bytes").write_text(f"{usage}\n")
    return root


@pytest.mark.parametrize(
    ("limit", "usage", "expected"),
    [
        (GIB, 256 * MIB, 768 * MIB),  # `docker run --memory=1g` on a cgroup v1 host
        (4 * GIB, 5 * GIB, 0),  # over the limit already: nothing left
        (9223372036854771712, GIB, 16 * GIB),  # v1's "no limit": the host's MemAvailable
    ],
)
def test_read_resources_cgroup_v1(tmp_path: Path, limit: int, usage: int, expected: int) -> None:
    root = fake_cgroup_v1(fake_root(tmp_path, 16 * 1024 * 1024), limit, usage)
    assert read_resources(root).mem_available == expected


def test_cgroup_v1_limit_turns_the_cache_off(tmp_path: Path) -> None:
    # 800 images at 640 px are 0.9 GiB even as one node-wide copy: over a 1 GiB container's headroom.
    root = fake_cgroup_v1(fake_root(tmp_path / "root", 16 * 1024 * 1024), GIB, 256 * MIB)
    data = make_dataset(tmp_path / "ds", 800)
    node = Node(read_resources(root), size_dataset(str(data), sys_root=root), rank_cpus=1, nranks=1)
    got = decide_for(node, user_args={}, rank_batch=16)
    cache = next(d for d in got if d.key == "cache")
    assert cache.value == "False" and "exceeds" in cache.reason, cache


def make_classify(root: Path, per_class: int) -> Path:
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True)
            for i in range(per_class):
                (root / split / cls / f"{i}.jpg").write_bytes(b"not read: the size comes from read_size")
    return root


def test_classify_sized_at_full_resolution(tmp_path: Path) -> None:
    data = make_classify(tmp_path / "cls", 50)
    images, size = classify_full_size(data, read_size=lambda p: (4000, 3000)) or (0, 0)
    assert (images, size) == (100, 100 * 4000 * 3000 * 3)  # the train split only, never resized
    assert classify_full_size(tmp_path / "missing", read_size=lambda p: (1, 1)) is None


@pytest.mark.parametrize(("mem", "expected"), [(8 * GIB, "ram"), (6 * GIB, "False")])
def test_classify_cache_decision(mem: int, expected: str) -> None:
    # 100 images of 12 MP are 3.4 GiB decoded, 6.7 GiB with the margin, whatever imgsz says.
    got = decide(
        rank_batch=16,
        user_args={"imgsz": "64"},
        train_images=100,
        resources=Resources(mem_available=mem, shm_free=0, node_cache_free=500 * GIB),
        rank_cpus=1,
        nranks=1,
        full_size_bytes=100 * 4000 * 3000 * 3,
    )
    cache = next(d for d in got if d.key == "cache")
    assert cache.value == expected and "full resolution" in cache.reason, cache


def test_read_resources_missing_tree(tmp_path: Path) -> None:
    res = read_resources(tmp_path, environ={})
    assert (res.mem_available, res.shm_free) == (0, 0)
    assert res.node_cache_free is not None  # /cache is missing: its nearest parent, tmp_path, is writable


def test_node_cache_room(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    assert node_cache_free(tmp_path, {}) is not None
    assert node_cache_free(tmp_path, {"RIG_IMAGE_CACHE": "off"}) is None
    assert node_cache_free(tmp_path, {"RIG_CACHE_MAX_GB": "1"}) == min(
        1 << 30, node_cache_free(tmp_path, {}) or 0
    )
    (tmp_path / "cache").chmod(0o555)
    try:
        if not os.access(tmp_path / "cache", os.W_OK):  # root writes anywhere
            assert node_cache_free(tmp_path, {}) is None
    finally:
        (tmp_path / "cache").chmod(0o755)


def test_discover_then_decide_end_to_end(tmp_path: Path) -> None:
    root = fake_root(tmp_path / "root", 16 * 1024 * 1024)
    data = make_dataset(tmp_path / "ds", 5)
    resources, dataset = read_resources(root), size_dataset(str(data), sys_root=root)
    got = values(decide_for(Node(resources, dataset, rank_cpus=2, nranks=1), user_args={}, rank_batch=16))
    assert got["cache"] == "ram"
    assert got["workers"] in {"0", "1", "2"}  # capped by the host filesystem's free space under tmp_path
