"""A container of the image to train in, and a training stopped with TERM: what the resume tests and
the tested window's test share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until


@contextlib.contextmanager
def box(containers: Containers, docker_client: Any, images: int, imgsz: int, seconds: int) -> Iterator[Any]:
    """A container of the image (as root) with a fresh volume at /runs holding a demo dataset of
    `images` training images and a quarter as many for validation, and the test scripts at /tests."""
    volume = docker_client.volumes.create(unique())
    try:
        mounts = {
            volume.name: {"bind": "/runs", "mode": "rw"},
            str(SCRIPTS): {"bind": "/tests", "mode": "ro"},
        }
        c = containers.run(
            ["sleep", str(seconds)], volumes=mounts, environment={"RIG_USER": "root"}, shm_size="1g"
        )
        data = f"rig demo-data /runs/demo --train {images} --val {images // 4} --imgsz {imgsz} >/dev/null"
        assert containers.exec(c, data, 300)[0] == 0
        yield c
    finally:
        containers.cleanup()
        volume.remove(force=True)


def stopped(containers: Containers, c: Any, command: str, log_file: str, after: str) -> str:
    """`command` started in the background, its trainer sent TERM once `after` succeeds; its log,
    once it exited 143."""
    run = f"cd /runs && rm -f rc && ({command}; echo $? > /runs/rc) > {log_file} 2>&1 &"
    assert containers.exec(c, run, 30)[0] == 0
    wait_until(lambda: containers.exec(c, after, 10)[0] == 0, timeout=600, interval=1)
    containers.exec(c, "pkill -TERM -f 'rig.launch.trainer'", 10)
    wait_until(lambda: containers.exec(c, "test -s /runs/rc", 10)[0] == 0, timeout=300, interval=1)
    log = containers.exec(c, f"cat {log_file}", 10)[1]
    assert containers.exec(c, "cat /runs/rc", 10)[1].strip() == "143", log[-4000:]
    return log
