"""The node image cache in the image: same batches as stock cache=ram, one file for two torchrun
ranks, rebuilt when an image changes, a killed build never used, a read-only location falls back.

Small generated datasets (24 images of 200x120 px, imgsz 160) keep each test to one container.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers

pytestmark = pytest.mark.image

PROBE = "python /probe/imagecache_probe.py"
DATA = "/tmp/d/data.yaml"
MAKE_DATA = "rig demo-data /tmp/d --train 24 --val 4 --imgsz 200 --height 120 >/dev/null"
TORCHRUN = "timeout 120 python -m torch.distributed.run --standalone --nproc-per-node 2"


def run(
    containers: Containers, script: str, network: str = "none", **env: str
) -> tuple[list[dict[str, Any]], str]:
    rc, logs = containers.oneshot(
        ["bash", "-c", f"set -e; {MAKE_DATA}; {script}"],
        timeout=300,
        network_mode=network,
        shm_size="1g",
        volumes={str(SCRIPTS): {"bind": "/probe", "mode": "ro"}},
        environment={"RIG_CACHE_DIR": "/tmp/cache", "MASTER_PORT": "29531", **env},
    )
    assert rc == 0, logs
    probes = [json.loads(line[6:]) for line in logs.splitlines() if line.startswith("PROBE ")]
    return probes, logs


def test_batches_equal_stock_cache_ram(containers: Containers) -> None:
    probes, logs = run(containers, f"{PROBE} batches {DATA}")
    assert [p["same"] for p in probes[:2]] == [True, True], probes  # in-process, and 2 fork workers
    assert probes[0]["shape"] == [4, 3, 160, 160]  # mosaic's output at imgsz (train augmentations on)
    assert probes[2] == {"cls": "NodeCachedYOLODataset", "ims": "Images", "cache": "ram"}
    assert logs.count("INFO imagecache: 24 images") == 3  # built once, then mapped
    assert logs.count("decoded into /tmp/cache/images/") == 1


def test_two_ranks_map_one_file_and_a_changed_image_rebuilds(containers: Containers) -> None:
    change = (
        "python -c \"import cv2, numpy as np; cv2.imwrite('/tmp/d/images/train/' + "
        "sorted(__import__('os').listdir('/tmp/d/images/train'))[0], np.zeros((120, 200, 3), np.uint8))\""
    )
    ranks = f"{TORCHRUN} /probe/imagecache_probe.py rank {DATA}"
    script = f"{ranks}; {ranks}; {change}; {ranks}; ls /tmp/cache/images"
    probes, logs = run(containers, script, network="bridge")  # torchrun's rendezvous resolves the host name
    assert len(probes) == 6, logs
    first, second, third = probes[0:2], probes[2:4], probes[4:6]
    for pair in (first, second, third):
        assert {p["rank"] for p in pair} == {0, 1}
        assert len({(p["path"], p["inode"]) for p in pair}) == 1, pair  # both ranks: the same file
        assert all(p["mapped"] and p["cls"] == "NodeCachedYOLODataset" for p in pair)
    assert first[0]["inode"] == second[0]["inode"]  # the second run reused it
    assert third[0]["path"] != first[0]["path"]  # one image changed: a new key
    assert logs.count("decoded into") == 2, logs  # once per distinct key, by one rank
    assert len([line for line in logs.splitlines() if line.endswith(".img")]) == 2


def test_a_build_killed_half_way_is_not_used(containers: Containers) -> None:
    script = (
        f"{PROBE} slow-build {DATA} & pid=$!; "
        "for i in $(seq 200); do ls /tmp/cache/images/*.tmp >/dev/null 2>&1 && break; sleep 0.1; done; "
        "sleep 1; kill -9 $pid; wait $pid || true; echo LEFT $(ls /tmp/cache/images); "
        f"{PROBE} batches {DATA}; echo AFTER $(ls /tmp/cache/images)"
    )
    probes, logs = run(containers, script)
    left = next(line for line in logs.splitlines() if line.startswith("LEFT "))
    assert ".tmp" in left and ".img" not in left, left  # killed: no finished file, only its .tmp
    assert [p["same"] for p in probes[:2]] == [True, True], probes  # rebuilt, same batches as stock
    after = next(line for line in logs.splitlines() if line.startswith("AFTER "))
    assert ".img" in after and ".tmp" not in after, after  # the dead build's file is gone


def test_a_read_only_location_falls_back_with_one_warning(containers: Containers) -> None:
    probes, logs = run(
        containers,
        f"mkdir -p /tmp/ro && chmod 555 /tmp/ro && {PROBE} fallback {DATA}",
        RIG_CACHE_DIR="/tmp/ro",
    )
    assert probes == [{"cls": "NodeCachedYOLODataset", "ims": "_ImageCache", "cache": "ram", "batches": 2}], (
        logs
    )
    warnings = [line for line in logs.splitlines() if line.startswith("WARNING imagecache")]
    assert len(warnings) == 1 and "Ultralytics' own cache=ram" in warnings[0], warnings


def test_rig_train_builds_the_node_cache_once_and_the_next_run_maps_it(containers: Containers) -> None:
    # Through the real trainer (RigTrainer.build_dataset), twice on the same data: decoded, then mapped.
    args = (
        "rig train device=cpu data=/tmp/demo/data.yaml model=yolo11n.yaml imgsz=64 batch=4 epochs=1 "
        "workers=0 cache=ram plots=False project=/tmp/runs"
    )
    script = (
        "rig demo-data /tmp/demo --train 16 --val 4 --imgsz 128 >/dev/null && "
        f"{args} name=a 2>&1 | grep 'INFO imagecache' && {args} name=b 2>&1 | grep 'INFO imagecache'"
    )
    rc, out = containers.oneshot(["bash", "-c", script], timeout=600)
    assert rc == 0, out
    lines = [line for line in out.splitlines() if line.startswith("INFO imagecache: 16 images")]
    assert len(lines) == 2, out
    assert " decoded into /cache/images/" in lines[0] and " mapped /cache/images/" in lines[1], out
    assert lines[0].split("/cache/images/")[1].split()[0] == lines[1].split("/cache/images/")[1].split()[0]
