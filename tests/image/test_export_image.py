"""`rig export` in the image: a one-epoch model exported and checked against PyTorch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.helpers.compose import take_down
from tests.helpers.names import unique

pytestmark = pytest.mark.image

# Inside the image: the comparison flags an error of 1 % of a channel's scale and passes round-off.
COMPARE_CHECK = (SCRIPTS / "export_compare.py").read_text()


def test_export_check_on_a_one_epoch_model(containers: Any, image: str, tmp_path: Path) -> None:
    # The run lands in a host folder, so `make export` can use the weights afterwards.
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    box = containers.run(
        ["sleep", "infinity"],
        network_mode="none",
        shm_size="1g",
        mem_limit="6g",
        volumes={str(runs): {"bind": "/tmp/runs", "mode": "rw"}},
    )

    def sh(cmd: str, timeout: int) -> tuple[int, str]:
        return containers.exec(box, cmd, timeout=timeout, user="yolo")

    rc, out = containers.exec(box, ["python", "-c", COMPARE_CHECK], timeout=60, user="yolo")
    assert rc == 0 and "COMPARE OK" in out, out

    rc, out = sh("head -c 4096 /dev/urandom > /tmp/broken.pt && rig export /tmp/broken.pt", 60)
    assert rc == 1 and out.strip().splitlines()[-1].startswith("ERROR rig: cannot load /tmp/broken.pt"), out

    rc, out = sh("rig demo-data /datasets/demo --train 16 --val 4 --imgsz 128", 60)
    assert rc == 0, out
    rc, out = sh(
        "yolo train model=yolo11n.yaml data=/datasets/demo/data.yaml epochs=1 imgsz=64 batch=8 "
        "device=cpu workers=0 plots=False project=/tmp/runs name=one exist_ok=True",
        300,
    )
    weights = "/tmp/runs/one/weights/best.pt"
    assert rc == 0, out[-4000:]

    rc, out = sh(f"rig export {weights}", 180)
    assert rc == 0, out[-4000:]
    assert out.strip().splitlines()[-1] == "/tmp/runs/one/weights/best.onnx"
    summary = [line for line in out.splitlines() if line.startswith("INFO export: ")]
    assert len(summary) == 1 and "largest |difference|" in summary[0], out[-2000:]
    assert "on 4 images at 64x64" in summary[0]  # the demo's val images, at the trained size

    # The failure path, end to end: no float32 export matches to 1e-12, so this bound must fail,
    # say so in one line and leave no .onnx behind.
    rc, out = sh(f"rig export {weights} --rtol 1e-12", 180)
    assert rc == 1, out[-4000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith("ERROR rig: export check failed: best.onnx vs PyTorch"), last
    assert not (runs / "one" / "weights" / "best.onnx").exists()

    # `make export` on a host file: the workstation service (CPU overlay) with the file's folder
    # mounted. A fresh datasets volume has no demo images, so the check uses Ultralytics' own.
    name, tag = image.rsplit(":", 1)
    project = unique("export")
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project}
    host_weights = runs / "one" / "weights" / "best.pt"
    try:
        proc = subprocess.run(
            ["make", "export", f"WEIGHTS={host_weights}", f"IMAGE={name}", f"TAG={tag}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        take_down(project)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "INFO export: best.onnx vs PyTorch on 2 images at 64x64" in output, output[-2000:]
    assert (runs / "one" / "weights" / "best.onnx").is_file()
