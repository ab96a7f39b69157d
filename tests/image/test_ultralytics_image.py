"""Ultralytics as its users know it, in the built image: settings that stick, stock defaults for
plain `yolo`, tracking and HEIC offline, pytest runs somewhere writable (issue 27)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS
from tests.helpers.compose import take_down
from tests.helpers.containers import IMAGE
from tests.helpers.names import unique

pytestmark = pytest.mark.image

MOUNT = {"volumes": {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}}

SETTINGS = "/workspace/.config/Ultralytics/settings.json"
READ_SETTINGS = (
    'python -c "from ultralytics.utils import SETTINGS as s; '
    "print('SEEN', s['tensorboard'], s['runs_dir'])\""
)


def compose(project: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    files = ["-f", str(REPO / "compose.yaml"), "-f", str(REPO / "compose.cpu.yaml")]
    return subprocess.run(
        ["docker", "compose", "-p", project, *files, *args],
        env={**os.environ, "IMAGE": IMAGE},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_yolo_settings_stick_in_a_new_process_and_after_down_up() -> None:
    project = unique("ultra-settings")
    run = ("run", "--rm", "--no-deps", "workstation", "bash", "-c")
    try:
        first = compose(
            project, *run, f"yolo settings tensorboard=False runs_dir=/workspace/mine && {READ_SETTINGS}"
        )
        assert first.returncode == 0, first.stdout + first.stderr
        assert "SEEN False /workspace/mine" in first.stdout, first.stdout  # a new process
        assert compose(project, "down").returncode == 0  # the volumes stay
        second = compose(project, *run, f"{READ_SETTINGS} && ls -l {SETTINGS}")
        assert second.returncode == 0, second.stdout + second.stderr
        assert "SEEN False /workspace/mine" in second.stdout, second.stdout  # after down/up
        assert " yolo yolo " in second.stdout  # the user's file, in the workspace volume
    finally:
        take_down(project, "-f", str(REPO / "compose.yaml"), "-f", str(REPO / "compose.cpu.yaml"))


def test_fresh_settings_are_the_images_defaults_with_tensorboard_on(containers: Any) -> None:
    keys = ("datasets_dir", "weights_dir", "runs_dir", "tensorboard", "sync")
    code = f"from ultralytics.utils import SETTINGS as s; print('DIRS', *(s[k] for k in {keys}))"
    rc, logs = containers.oneshot(["python", "-c", code], timeout=180, network_mode="none")
    assert rc == 0, logs
    assert "DIRS /datasets /weights /workspace/runs True False" in logs


def test_unwritable_settings_are_one_doctor_warning(containers: Any) -> None:
    script = (
        f"rig doctor --json > /tmp/ok.json; chmod a-w {SETTINGS} && rig doctor --json > /tmp/ro.json; "
        "cat /tmp/ok.json; echo SPLIT; cat /tmp/ro.json"
    )
    _, logs = containers.oneshot(["bash", "-c", script], timeout=300, network_mode="none")
    ok_text, ro_text = logs.split("SPLIT")
    ok = {c["name"]: c for c in json.loads(ok_text[ok_text.index("{") :])["checks"]}
    ro = {c["name"]: c for c in json.loads(ro_text[ro_text.index("{") :])["checks"]}
    assert ok["settings"]["status"] == "pass", ok["settings"]
    assert ro["settings"]["status"] == "warn" and SETTINGS in ro["settings"]["detail"], ro["settings"]
    new_warnings = {n for n, c in ro.items() if c["status"] == "warn"} - {
        n for n, c in ok.items() if c["status"] == "warn"
    }
    assert new_warnings == {"settings"}
    # A uid that cannot write the workspace gets the image's defaults, read-only, and the warning.
    _, logs = containers.oneshot(
        ["bash", "-c", f"rig doctor --json; {READ_SETTINGS}"],
        timeout=300,
        network_mode="none",
        user="4321:4321",
    )
    checks = {c["name"]: c for c in json.loads(logs[logs.index("{") : logs.rindex("}") + 1])["checks"]}
    assert checks["settings"]["status"] == "warn" and "uid 4321" in checks["settings"]["detail"]
    assert "SEEN True /workspace/runs" in logs


@pytest.mark.slow
def test_training_curves_reach_tensorboard_beside_rig_telemetry(containers: Any) -> None:
    script = (
        "rig demo-data /tmp/demo --train 8 --val 2 --imgsz 64 >/dev/null 2>&1 && cd /tmp && "
        "rig train data=/tmp/demo/data.yaml model=yolo11n.yaml epochs=1 imgsz=64 batch=4 device=cpu "
        "plots=False project=/workspace/runs name=t && python /tests/tensorboard_runs.py"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", script], timeout=400, network_mode="none", shm_size="1g", **MOUNT
    )
    assert rc == 0, logs[-3000:]
    runs = {line.split()[1]: line for line in logs.splitlines() if line.startswith("RUN ")}
    ultralytics_run = runs.get(".", "")
    for tag in ("train/box_loss", "metrics/mAP50(B)", "lr/pg0"):  # Ultralytics' own curves
        assert f"'{tag}'" in ultralytics_run, runs
    assert "'train/data_wait_share'" in runs.get("telemetry", ""), runs  # rig's, beside them


MEMORY_1G = {"mem_limit": "1g", "memswap_limit": "1g"}


def test_plain_yolo_val_under_a_1g_container_keeps_stock_cache(containers: Any) -> None:
    script = (
        "rig demo-data /tmp/demo --train 4 --val 16 --imgsz 320 >/dev/null && cd /tmp && "
        "yolo detect val model=yolo11n.yaml data=/tmp/demo/data.yaml imgsz=320 batch=8 project=/tmp/runs"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", script], timeout=400, network_mode="none", shm_size="512m", **MEMORY_1G
    )
    assert rc == 0, logs[-3000:]  # 137: OOM-killed
    assert "Caching images" not in logs and "Results saved to" in logs, logs[-3000:]


@pytest.mark.slow
def test_rig_train_sizes_the_classification_cache_from_the_memory_limit(containers: Any) -> None:
    # 24 train images of 12 MP are 0.8 GiB decoded, 1.6 GiB with the margin: over a 1 GiB container
    # (cgroup v1 or v2, whichever this host has), though far under the host's RAM.
    script = (
        "python /tests/classify_data.py && cd /tmp && rig train model=yolo11n-cls.yaml data=/tmp/cls "
        "epochs=1 imgsz=32 batch=8 device=cpu plots=False project=/tmp/runs name=c"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", script], timeout=500, network_mode="none", shm_size="512m", **MEMORY_1G, **MOUNT
    )
    assert rc == 0, logs[-3000:]
    said = "cache=False: classification: 24 images"
    decision = next((line for line in logs.splitlines() if said in line), "")
    assert decision.startswith("INFO ") and "exceeds" in decision, logs[-3000:]
    assert "Caching images" not in logs


def test_tracking_works_offline_with_random_weights_and_heic_decodes(containers: Any) -> None:
    script = (
        "python /tests/tracking_clip.py && python /tests/heic_and_tracking_imports.py && cd /tmp && "
        "yolo track model=yolo11n.yaml source=/tmp/clip.mp4 imgsz=160 conf=0.001 project=/tmp/runs"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", script], timeout=400, network_mode="none", shm_size="512m", **MOUNT
    )
    assert rc == 0, logs[-3000:]
    assert "IMPORTS-OK" in logs
    assert "video 1/1 (frame 20/20) /tmp/clip.mp4" in logs, logs[-3000:]
    assert "requirement" not in logs.lower(), logs[-3000:]  # nothing Ultralytics would install


def test_runs_under_pytest_land_in_the_runs_volume(containers: Any) -> None:
    # PYTEST_CURRENT_TEST is how Ultralytics knows pytest runs it; its runs then go to
    # site-packages/tests/tmp/runs, a link to the runs volume in the image.
    code = (
        "from ultralytics import YOLO; from ultralytics.utils import ASSETS; "
        "r = YOLO('yolo11n.yaml').predict(ASSETS / 'bus.jpg', imgsz=64, save=True); "
        "print('SAVED', r[0].save_dir)"
    )
    rc, logs = containers.oneshot(
        ["python", "-c", code], timeout=180, network_mode="none", environment={"PYTEST_CURRENT_TEST": "t"}
    )
    assert rc == 0, logs[-3000:]
    assert "SAVED /workspace/runs/detect/predict" in logs, logs[-3000:]
