"""Mosaic, the affine warp, colour and layout on the device (rig.yolo.augment) in the image, on
CPU tensors: the same pixels as Ultralytics' Mosaic + RandomPerspective (OpenCV) + RandomHSV + Format,
the same labels and RNG draws, the dataset's classes in their order and unpickled by name in a
spawned loader worker, and `rig train` using it by default and saying so once.
tools/gpu_check.sh runs the same probes on CUDA.

Small generated datasets (24 images of 200x120 px, imgsz 160) keep each test to one container.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers

pytestmark = pytest.mark.image

PROBE = "python /probe/device_augment_probe.py"
DATA = "/tmp/d/data.yaml"
MAKE_DATA = "rig demo-data /tmp/d --train 24 --val 4 --imgsz 200 --height 120 >/dev/null"
WITHIN_ONE = 0.999  # of the pixels; none more than 2 levels off
STOCK = [["Mosaic", "CopyPaste", "RandomPerspective"], "MixUp", "CutMix", "Albumentations"]
STOCK += ["RandomHSV", "RandomFlip", "RandomFlip", "Format"]
DEFERRED = [["DeferredMosaic", "CopyPaste", "DeferredPerspective"], "MixUp", "CutMix", "Albumentations"]
DEFERRED += ["DeferredHSV", "DeferredFlip", "DeferredFlip", "DeferredFormat"]
NO_HSV = "hsv_h=0,hsv_s=0,hsv_v=0"  # RandomHSV off: what is left is the geometry, compared exactly


def run(containers: Containers, script: str, **env: str) -> tuple[list[dict[str, Any]], str]:
    rc, logs = containers.oneshot(
        ["bash", "-c", f"set -e; {MAKE_DATA}; {script}"],
        timeout=600,
        network_mode="none",
        shm_size="1g",
        volumes={str(SCRIPTS): {"bind": "/probe", "mode": "ro"}},
        environment={"RIG_CACHE_DIR": "/tmp/cache", **env},
    )
    assert rc == 0, logs[-4000:]
    probes = [json.loads(line[6:]) for line in logs.splitlines() if line.startswith("PROBE ")]
    return probes, logs


def test_the_device_tail_equals_randomhsv_and_format_on_cpu_tensors(containers: Containers) -> None:
    script = "; ".join(
        [
            f"{PROBE} synthetic cpu torch",  # the kernels a GPU runs, here on CPU tensors
            f"{PROBE} synthetic cpu opencv",  # what a CPU rank runs
            f"{PROBE} batches {DATA} cpu none 0 torch",
            f"{PROBE} batches {DATA} cpu ram 2 torch",  # node image cache, two forked workers
            f"{PROBE} batches {DATA} cpu disk 0 auto",
            f"{PROBE} spawn {DATA}",  # every wrapper, as `rig train` builds the dataset
        ]
    )
    probes, logs = run(containers, script)
    assert len(probes) == 6, logs[-4000:]
    *probes, spawned = probes
    for p in probes:
        assert p["within1"] >= WITHIN_ONE and p["max"] <= 2, p
    torch_synthetic, opencv_synthetic, *batches = probes
    assert torch_synthetic["cases"] == 200 and torch_synthetic["exact"] > 0.99, torch_synthetic
    assert opencv_synthetic["exact"] == 1.0, opencv_synthetic  # Ultralytics' own calls: bit-exact
    for p in batches:
        assert p["labels_equal"], p  # same seeds: same mosaic, affine, flips, boxes
        assert p["shape"] == [4, 3, 160, 160] and p["handed_over"]["rig_warp"] == [4, 28], p
        assert p["ours_transforms"] == DEFERRED and p["stock_transforms"] == STOCK, p
    assert [p["cls"] for p in batches] == [
        "DeviceAugmentedYOLODataset",
        "DeviceAugmentedNodeCachedYOLODataset",
        "DeviceAugmentedYOLODataset",
    ]
    assert batches[2]["exact"] == 1.0  # auto on a CPU: OpenCV's calls
    # The wrappers in their order, outermost first; a spawned worker unpickles each class, the
    # deferred steps and the collate by name and loads what a forked one loads.
    assert spawned["classes"] == [
        "rig.yolo.draws.SeededDeviceAugmentedNodeCachedYOLODataset",
        "rig.yolo.augment.dataset.DeviceAugmentedNodeCachedYOLODataset",
        "rig.yolo.nodecache.cached_dataset.NodeCachedYOLODataset",
        "ultralytics.data.dataset.YOLODataset",
    ], spawned
    assert spawned["transforms"] == DEFERRED, spawned
    assert spawned["keys_equal"] and spawned["values_equal"], spawned
    assert spawned["handed_over"] == ["img", "rig_device_tail", "rig_warp", "rig_warp_tiles"], spawned


def test_the_geometry_equals_ultralytics_opencv_warp_on_cpu_tensors(containers: Containers) -> None:
    script = "; ".join(
        [
            f"{PROBE} segments {DATA} /tmp/s",  # the same images with polygons: segments and masks
            f"{PROBE} warp cpu torch",  # the kernels a GPU runs, here on CPU tensors
            f"{PROBE} warp cpu opencv",  # what a CPU rank runs
            f"{PROBE} batches {DATA} cpu none 0 torch {NO_HSV},degrees=10,shear=5,perspective=5e-4,flipud=.5",
            f"{PROBE} batches /tmp/s/data.yaml cpu ram 2 torch {NO_HSV},task=segment,degrees=10",
            f"{PROBE} batches {DATA} cpu none 0 torch {NO_HSV},rect=True",  # letterboxed into rect shapes
            f"{PROBE} batches {DATA} cpu none 0 torch mixup=0.5",  # the geometry stays in the workers
        ]
    )
    probes, logs = run(containers, script)
    assert len(probes) == 7, logs[-4000:]
    _, *warps, turned, segmented, rect, mixup = probes
    for p in warps:  # OpenCV's INTER_LINEAR, border 114, to the level: affine and perspective, 1-4 channels
        assert p["images"] == 56 and p["exact"] == 1.0 and p["over1"] == 0, p
        assert p["grid_sample"]["exact"] < 0.95, p  # where float bilinear (torch's grid_sample) lands
    for p in (turned, segmented, rect):
        assert p["labels_equal"] and p["exact"] == 1.0, p  # boxes, classes, masks; every pixel
        assert p["ours_transforms"] == DEFERRED, p
    assert segmented["labels_compared"] == ["cls", "bboxes", "batch_idx", "masks", "sem_masks"], segmented
    assert segmented["cls"] == "DeviceAugmentedNodeCachedYOLODataset", segmented
    assert rect["shape"] == [4, 3, 96, 160], rect
    assert mixup["labels_equal"] and mixup["within1"] >= WITHIN_ONE and mixup["max"] <= 2, mixup
    assert mixup["ours_transforms"][0] == ["Mosaic", "CopyPaste", "RandomPerspective"], mixup
    kept = "INFO trainer: device augment: the recipe's MixUp works on the pixels between mosaic and RandomHSV"
    assert f"{kept}: mosaic and the affine warp stay in the loader workers" in logs


def test_the_gains_are_ultralytics_draws(containers: Containers) -> None:
    probes, _ = run(containers, f"{PROBE} gains 20000")
    (p,) = probes
    assert p["draw_for_draw"] and p["same_rng_use"], p
    assert max(p["ks_vs_uniform"]) < p["ks_critical_01pct"], p  # uniform(-gain, gain), each channel
    assert max(p["ks_stock_vs_uniform"]) < p["ks_critical_01pct"], p


def test_rig_train_uses_it_by_default_says_so_once_and_switches_off(containers: Containers) -> None:
    # Through the real trainer: node image cache and workers; cache=disk with mosaic closing in the
    # second epoch (the transforms are built again); switched off.
    train = (
        "rig train device=cpu data=/tmp/d/data.yaml model=yolo11n.yaml imgsz=64 batch=4 plots=False "
        "project=/tmp/runs exist_ok=True"
    )
    script = "; ".join(
        [
            f"{train} name=ram cache=ram workers=2 epochs=1 > /tmp/ram.log 2>&1",
            f"{train} name=disk cache=disk workers=0 epochs=2 close_mosaic=1 > /tmp/disk.log 2>&1",
            f"RIG_DEVICE_AUGMENT=0 {train} name=off workers=0 epochs=1 > /tmp/off.log 2>&1",
            "for r in ram disk off; do echo RUN $r; grep -c 'INFO trainer: device augment' /tmp/$r.log; "
            "grep 'INFO trainer: device augment' /tmp/$r.log; grep -c . /tmp/runs/$r/results.csv; done",
        ]
    )
    _, logs = run(containers, script)
    out = logs[logs.index("RUN ram") :].splitlines()
    assert out[0:4] == ["RUN ram", "1", out[2], "2"], out  # one line; a header and one epoch
    assert out[2].startswith("INFO trainer: device augment: the loader workers draw the augmentation"), out
    assert out[4:8] == ["RUN disk", "1", out[2], "3"], out
    assert out[8] == "RUN off" and out[9] == "1" and "device augment off (RIG_DEVICE_AUGMENT=0)" in out[10], (
        out
    )
    assert out[11] == "2", out
