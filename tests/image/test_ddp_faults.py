"""Faults a multi-GPU box would hit, shown on real CPU ranks in the image: `rig train device=cpu
--cpu-ranks 2` (rig's torchrun, the binder, the trainer, gloo) on a tiny generated dataset.

- rect=True with two ranks trains (rect off for training, one WARNING) instead of hanging;
- the label scan and the node image cache are built by the launcher before any rank waits on another;
- a node cache that cannot be used at run time turns cache off, never one copy per rank;
- a SIGKILL during Ultralytics' own save_model leaves last.pt and best.pt whole.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.names import unique

pytestmark = pytest.mark.image

# 10 training images at batch 4 (2 per rank): 5 batches, 3 on one rank and 2 on the other with rect.
DEMO = "rig demo-data /tmp/demo --train 10 --val 4 --imgsz 64 >/dev/null"
TRAIN = (
    "timeout 420 rig train device=cpu --cpu-ranks 2 data=/tmp/demo/data.yaml model=yolo11n.yaml "
    "epochs=1 imgsz=64 batch=4 workers=0 plots=False project=/tmp/runs name=run"
)


def _train(containers: Containers, args: str, **kwargs: object) -> tuple[int, str]:
    env = {"RIG_NCCL_TIMEOUT": "60", "RIG_CACHE_DIR": "/tmp/cache", **kwargs.pop("environment", {})}  # type: ignore[dict-item]
    return containers.oneshot(
        ["bash", "-c", f"set -e; {DEMO}; {TRAIN} {args}; ls /tmp/runs/run/weights"],
        timeout=600,
        name=unique("ddpfaults"),
        shm_size="1g",
        environment=env,
        **kwargs,
    )


def _after(logs: str, marker: str) -> str:
    return logs[logs.index(marker) :] if marker in logs else ""


# ---- issue 21 item 7 ----------------------------------------------------------------------------------
def test_rect_with_two_ranks_trains_without_rect_and_says_so(containers: Containers) -> None:
    rc, logs = _train(containers, "rect=True")
    assert rc == 0, logs[-4000:]
    assert "last.pt" in logs, logs[-4000:]
    executing = next(line for line in logs.splitlines() if "Executing:" in line)
    assert " rect=False " in executing and "rect=True" not in executing, executing
    warnings = [line for line in logs.splitlines() if line.startswith("WARNING")]
    assert [w for w in warnings if "rect" in w] == [
        next(
            w
            for w in warnings
            if w.startswith("WARNING launch: rect=True with 2 ranks: rect is off for training")
        )
    ], warnings


# ---- issue 21 item 8 ----------------------------------------------------------------------------------
def test_the_launcher_builds_the_label_and_image_caches_before_the_ranks_start(
    containers: Containers,
) -> None:
    rc, logs = _train(containers, "cache=ram")
    assert rc == 0, logs[-4000:]
    before, ranks = logs.split("INFO launch: Executing:", 1)
    # The launcher scanned the labels and decoded both sets into the node cache, on the node's CPUs...
    assert re.search(r"INFO imagecache: 10 images .* decoded into /tmp/cache/images/", before), before[-3000:]
    assert re.search(r"INFO imagecache: 4 images .* decoded into /tmp/cache/images/", before), before[-3000:]
    assert "INFO prepare: train: 10 images and their labels ready before the ranks start" in before
    # ...so the ranks, once in their process group, only map them: no rank builds while others wait.
    assert "decoded into" not in ranks, ranks[-4000:]
    assert re.search(r"INFO imagecache: 10 images .* mapped /tmp/cache/images/", ranks), ranks[-4000:]
    assert "New cache created" not in ranks, ranks[-4000:]  # Ultralytics found the label cache


# ---- issue 21 item 10 ---------------------------------------------------------------------------------
def test_a_node_cache_unusable_at_run_time_turns_cache_off_not_a_copy_per_rank(
    containers: Containers,
) -> None:
    # /cache on a small local disk: room for the images (the launch counts one copy per node), less
    # than the cache keeps free (1 GiB), so the build at run time finds it unusable.
    rc, logs = _train(
        containers,
        "",
        environment={"RIG_CACHE_DIR": "/cache"},
        tmpfs={"/cache": "size=64m,uid=1000,gid=1000"},
    )
    assert rc == 0, logs[-4000:]
    assert re.search(r"INFO launch: cache=ram: .* one copy per node", logs), logs[-4000:]
    warned = [line for line in logs.splitlines() if "node image cache cannot be used" in line]
    assert len(warned) == 1 and warned[0].startswith("WARNING") and "cache=False" in warned[0], logs[-4000:]
    executing = next(line for line in logs.splitlines() if "Executing:" in line)
    assert " cache=False " in executing, executing
    assert "Caching images" not in logs, logs[-4000:]  # Ultralytics' own cache=ram: a copy per rank


# ---- issue 21 item 4 ----------------------------------------------------------------------------------
def test_a_sigkill_during_ultralytics_save_model_leaves_whole_checkpoints(containers: Containers) -> None:
    rc, logs = containers.oneshot(
        ["bash", "-c", f"set -e; {DEMO}; timeout 400 python /tests/checkpoint_kill.py"],
        timeout=500,
        name=unique("ddpfaults"),
        network_mode="none",
        volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
    )
    assert rc == 0, logs[-3000:]
    assert (
        "KILLED True while temporary file .last.pt." in logs
        or "KILLED True while temporary file .best.pt." in logs
    ), logs[-3000:]
    assert "SEEN-PARTIAL []" in logs, logs[-3000:]  # never a truncated last.pt or best.pt
    assert re.search(r"^LOADS last\.pt epoch \d+$", logs, re.MULTILINE), logs[-3000:]
    assert re.search(r"^LOADS best\.pt epoch \d+$", logs, re.MULTILINE), logs[-3000:]
