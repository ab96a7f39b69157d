"""The tested window of Ultralytics releases: the image with another release installed in place of its
pin (`make test-ultralytics V=X`; CI runs the window's oldest, rig.yolo.contract.WINDOW).

The release's wheel is downloaded on the host (checked against the index's SHA-256) and installed in
a derived image as a platform team would (`pip install --no-deps` over the image's own distribution,
the image's headless OpenCV kept). In one container, with loader workers:
- `rig --version` names it, and `rig train` starts with no WARNING about it (every feature on);
- a 2-CPU-rank `rig train` stopped by TERM inside an epoch and resumed with resume=auto ends with the
  weights and EMA of the uninterrupted run, bit for bit (rig's checkpoint keys on this release's own
  save_model);
- the device tail renders what this release's transforms render on the CPU (same labels, pixels);
- plain `yolo train` is this release's own: it trains, and nothing of rig's trainer is in it.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest
from rig.yolo import contract

from tests.helpers import trainbox
from tests.helpers.containers import Containers
from tools import ultralytics_releases

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.ultralytics_window]

VERSION = os.environ.get("ULTRALYTICS_VERSION") or contract.WINDOW.oldest


@pytest.fixture(scope="module")
def window_image(docker_client: Any, image: str) -> Iterator[str]:
    """The image with Ultralytics VERSION installed in place of its pin (built once, kept as a tag)."""
    wheel = ultralytics_releases.wheel(VERSION)
    pip = "PYTHONPATH=/opt/rig/pip /opt/venv/bin/python -m pip --disable-pip-version-check -q"
    dockerfile = (
        f"FROM {image}\n"
        f"COPY {wheel.name} /tmp/\n"
        f"RUN {pip} uninstall -y ultralytics-opencv-headless "
        f"&& {pip} install --no-deps --no-index /tmp/{wheel.name} && rm /tmp/{wheel.name}\n"
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), (wheel.name, wheel.read_bytes())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    tag = f"{image}-ultralytics-{VERSION}"
    docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, pull=False)
    yield tag


def test_the_window_trains_stops_resumes_exactly_and_leaves_plain_yolo_its_own(
    docker_client: Any, window_image: str
) -> None:
    containers = Containers(docker_client, window_image)
    with trainbox.box(containers, docker_client, images=64, imgsz=64, seconds=900) as c:
        rc, version = containers.exec(c, "rig --version", 60)
        assert rc == 0 and f"ultralytics {VERSION}," in version, version

        # 64 images at batch 4 over 2 ranks: 16 batches of 2 an epoch per rank, 2 loader workers each
        # (the ranks agree on a stop every 10 batches: a stop can land inside the first epoch).
        train = (
            "PYTHONPATH=/tests/slow_clock RIG_TEST_EMA_TAU=1 rig train device=cpu --cpu-ranks 2 workers=2 "
            "data=/runs/demo/data.yaml model=/tests/tiny_detect.yaml epochs=2 close_mosaic=1 imgsz=64 "
            "batch=4 nbs=8 save_period=1 plots=False project=/runs/detect"
        )
        rc, whole = containers.exec(c, f"cd /runs && {train} name=whole 2>&1", 600)
        assert rc == 0, whole[-4000:]
        assert not re.search(r"^WARNING ultralytics-check", whole, re.MULTILINE), whole[-4000:]
        assert "rank 0: 2 loader workers for training" in whole, whole[-4000:]

        # Each batch 0.5 s longer in the run to stop: a TERM after its first checkpoint lands inside the
        # first epoch, whose order a release that makes its loader's iterator at construction (before
        # 8.4.158) would have drawn before rig's sampler was in place.
        cut = f"RIG_TEST_TRAIN_BATCH_S=0.5 RIG_CHECKPOINT_EVERY=1 {train} name=cut resume=auto"
        wrote = "grep -q 'INFO trainer: checkpoint: .* continues at epoch 1/2' /runs/cut.log"
        log = trainbox.stopped(containers, c, cut, "/runs/cut.log", wrote)
        stop = re.search(r"INFO trainer: stop: \S+ continues at (epoch 1/2 at batch \d+/16)", log)
        assert stop and "Traceback" not in log, log[-4000:]
        rc, resumed = containers.exec(c, f"cd /runs && {train} name=cut resume=auto 2>&1", 600)
        assert rc == 0 and f"at {stop.group(1)}" in resumed and "Traceback" not in resumed, resumed[-4000:]
        pair = " ".join(f"/runs/detect/{name}/weights/epoch1.pt" for name in ("whole", "cut"))
        rc, out = containers.exec(c, f"python /tests/same_weights.py {pair}", 120)
        assert rc == 0, out
        parts = json.loads(out.strip().splitlines()[-1])
        assert parts["ema"][0] == parts["rig_resume.model"][0] == parts["rig_resume.ema"][0] == 0, parts

        # The device tail against this release's own transforms: same labels and seeds, same pixels.
        probe = "python /tests/device_augment_probe.py batches /runs/demo/data.yaml cpu ram 2 torch"
        rc, out = containers.exec(c, f"RIG_CACHE_DIR=/tmp/cache {probe}", 300)
        assert rc == 0, out[-4000:]
        (found,) = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("PROBE ")]
        assert found["labels_equal"] and found["within1"] >= 0.999 and found["max"] <= 2, found

        # Plain `yolo train`: this release's own trainer, untouched by rig.
        plain = (
            "yolo train device=cpu data=/runs/demo/data.yaml model=/tests/tiny_detect.yaml epochs=1 "
            "imgsz=64 batch=4 plots=False project=/runs/detect name=plain"
        )
        rc, out = containers.exec(c, f"cd /runs && {plain} 2>&1", 600)
        assert rc == 0 and "1 epochs completed" in out, out[-4000:]
        assert "INFO trainer:" not in out and "rig_resume" not in out, out[-4000:]
        rc, keys = containers.exec(c, "python /tests/checkpoint_epochs.py /runs/detect/plain/weights", 120)
        assert rc == 0 and json.loads(keys.strip().splitlines()[-1])["last.pt"][1] is None, keys
