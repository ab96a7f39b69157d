"""The fast path inside the image: baked defaults, offline train/val/predict/export, demo data, bench."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.helpers import SCRIPTS

pytestmark = pytest.mark.image

# Help links Ultralytics prints, docs and the Netron viewer (never fetched), and the local
# TensorBoard its callback names (tensorboard=True in the image's settings); any other URL in a
# log means it tried the network.
_ALLOWED_URL = re.compile(r"https://(docs\.ultralytics\.com/\S*|netron\.app)|http://localhost:6006/")
_URL = re.compile(r"\b(?:https?|ftp)://\S+")
_NETWORK_WORDS = re.compile(
    r"download|may be offline|retrying|github\.com|urlopen|connectionerror", re.IGNORECASE
)


def assert_no_network_attempt(logs: str) -> None:
    urls = [u for u in _URL.findall(logs) if not _ALLOWED_URL.match(u)]
    assert not urls, f"URLs in the logs (a download attempt?): {urls[:5]}"
    words = sorted({m.group(0).lower() for m in _NETWORK_WORDS.finditer(logs)})
    assert not words, f"network words in the logs: {words}\n{logs[-3000:]}"


MOUNT = {"volumes": {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}}


def py(script: str) -> list[str]:
    return ["python", f"/tests/{script}"]


def test_overlay_keys_exist_upstream_and_reach_default_cfg(containers: Any) -> None:
    rc, logs = containers.oneshot(py("yolo_overlay_keys.py"), timeout=120, network_mode="none", **MOUNT)
    assert rc == 0, logs
    assert "OK" in logs


def test_rig_reads_data_yamls_with_ultralytics_own_rules(containers: Any) -> None:
    # rig.yolo.ultra uses Ultralytics' own IMG_FORMATS, settings and smart_value in the image; its
    # copies for hosts without Ultralytics must match them.
    demo = "rig demo-data /datasets/demo --train 4 --val 2 --imgsz 64 >/dev/null"
    cmd = f"{demo} && cd /datasets && python /tests/yolo_data_rules.py"
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=120, network_mode="none", **MOUNT)
    assert rc == 0 and "OK" in logs, logs


def test_trainer_types_arguments_with_ultralytics_smart_value(containers: Any) -> None:
    rc, logs = containers.oneshot(py("trainer_smart_value.py"), timeout=120, network_mode="none", **MOUNT)
    assert rc == 0 and "OK" in logs, logs


def test_user_argument_wins_in_the_trainer(containers: Any) -> None:
    demo = "rig demo-data /datasets/demo --train 4 --val 2 --imgsz 64 >/dev/null"
    cmd = f"{demo} && python /tests/trainer_user_wins.py"
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=120, network_mode="none", **MOUNT)
    assert rc == 0, logs
    assert "USER ram DEFAULT False False" in logs


def test_offline_train_val_predict_export(containers: Any) -> None:
    rc, logs = containers.oneshot(
        ["bash", "/tests/offline_yolo_steps.sh"], timeout=420, network_mode="none", shm_size="512m", **MOUNT
    )
    assert rc == 0, logs[-4000:]
    assert "ALL-STEPS-DONE" in logs
    assert_no_network_attempt(logs)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        ("predict model=yolo11s.pt source=/tmp", "put the file at /weights/yolo11s.pt"),
        ("train model=yolo11n.yaml data=coco8.yaml", "put the dataset under /datasets/coco8"),
    ],
)
def test_missing_weight_or_dataset_is_one_line(containers: Any, args: str, expect: str) -> None:
    rc, logs = containers.oneshot(["rig", "yolo", *args.split()], timeout=60, network_mode="none")
    assert rc == 1
    lines = [line for line in logs.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR rig: "), logs
    assert expect in lines[0]


def test_settings_and_fonts_for_any_uid(containers: Any) -> None:
    # An arbitrary uid without a passwd entry: settings read as baked, fonts local, DDP dir writable.
    rc, logs = containers.oneshot(
        py("settings_any_uid.py"), timeout=120, network_mode="none", user="4321:4321", entrypoint=[], **MOUNT
    )
    assert rc == 0, logs
    assert "SETTINGS-OK" in logs
    assert_no_network_attempt(logs)


def test_demo_data_is_deterministic(containers: Any) -> None:
    cmd = ["bash", "/tests/demo_data_determinism.sh"]
    rc, logs = containers.oneshot(cmd, timeout=60, network_mode="none", **MOUNT)
    assert rc == 0, logs
    sums = re.findall(r"^SUM (\S+)", logs, re.MULTILINE)
    assert len(sums) == 3 and sums[0] == sums[1] != sums[2], logs
    assert re.search(r"^COUNT 6$", logs, re.MULTILINE), logs
    labels = re.findall(r"^LABEL (.*)$", logs, re.MULTILINE)
    assert len(labels) >= 8  # at least one object in each of the 8 images
    for line in labels:
        cls, *box = line.split()
        assert 0 <= int(cls) < 5 and len(box) == 4 and all(0 < float(v) <= 1 for v in box), line


def test_bench_quick_on_cpu_writes_json(containers: Any) -> None:
    # --compile has its own test (test_speed.py): compiling YOLO11n at 320 px takes minutes here.
    cmd = (
        "rig bench --quick --imgsz 320 --train-images 96 --source-size 640x360"
        " --json /tmp/b.json >&2 && cat /tmp/b.json"
    )
    # 420 s: the step's levers (channels_last, the optimizer's kernels) each run the step again (+60 s CPU).
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=420, network_mode="none", shm_size="1g")
    assert rc == 0, logs[-3000:]
    res = json.loads(logs[logs.rindex('{\n  "loader"') :])
    assert res["loader"]["stock_img_s"] > 0 and res["loader"]["ours_img_s"] > 0 and res["step_img_s"] > 0
    assert res["bottleneck"] in {"loader", "compute"} and res["bottleneck_reason"]
    assert res["loader"]["ours"]["cache"] == "ram" and res["loader"]["stock"]["cache"] is False
    assert res["compile_used"] is False and res["step_compiled_img_s"] is None
    assert "bottleneck:" in logs
    # The step with each lever, from the same weights on the same batches, its losses within the CPU's
    # bound (0.1 %: no AMP on the CPU); CUDA graphs need a GPU.
    step = res["step"]
    assert res["batch"] == 16 and step["batch"] == 16 and step["amp_noise"] == 1e-3
    levers = {lv["name"]: lv for lv in step["levers"]}
    assert list(levers) == ["channels_last", "fused_optimizer", "cuda_graphs", "bf16"]
    for name in ("channels_last", "fused_optimizer"):
        assert levers[name]["img_s"] > 0 and levers[name]["equal"] is True, levers[name]
    assert levers["fused_optimizer"]["note"].startswith("SGD on multi-tensor (foreach) kernels")
    assert levers["cuda_graphs"]["img_s"] is None
    assert levers["cuda_graphs"]["note"] == "CUDA graphs need a GPU"
    # Ultralytics' amp=bf16 needs CUDA with native bfloat16: not measured, its own words why.
    assert levers["bf16"]["img_s"] is None and "requires CUDA with native bfloat16" in levers["bf16"]["note"]
    # The optimizer Ultralytics' trainer builds for YOLO11's recipe, its step timed alone.
    assert step["optimizer"] == "SGD" and step["accumulate"] == 4 and step["optimizer_step_ms"] > 0
    assert 0 < step["optimizer_share"] < 1 and "optimizer step (SGD)" in logs
    # Recorded where `rig train device=cpu` reads it (the cache volume), and said so.
    assert res["levers_record"] == "/cache/levers/cpu-torch2.3.1-yolo11n-320px-b16-fp32.json", res
    assert "levers: measured for rig train in /cache/levers/" in logs


def test_demo_data_is_idempotent_and_never_clobbers(containers: Any) -> None:
    cmd = ["bash", "/tests/demo_data_idempotence.sh"]
    rc, logs = containers.oneshot(cmd, timeout=60, network_mode="none", **MOUNT)
    assert rc == 0, logs
    assert "SAME-OK" in logs and "already holds this demo dataset" in logs
    assert "DIFFERENT-RC 1" in logs and "pass --force to replace it" in logs
    assert "MINE-RC 1 keep" in logs and "not made by rig demo-data" in logs


def test_a_dataset_moved_to_another_path_trains_and_validates(containers: Any) -> None:
    rc, logs = containers.oneshot(
        ["bash", "/tests/dataset_moved.sh"], timeout=420, network_mode="none", shm_size="512m", **MOUNT
    )
    assert rc == 0, logs[-4000:]
    assert "PATH-LINES 0" in logs and "TRAIN-OK" in logs, logs[-4000:]  # demo-data names no folder
    val = [line.removeprefix("VAL ") for line in logs.splitlines() if line.startswith("VAL ")]
    assert [line for line in val if "does not exist" in line] == [
        "INFO data: /tmp/moved/old.yaml: path: /datasets/made-elsewhere does not exist; the yaml's "
        "own folder holds the dataset, so path: is /tmp/moved"
    ], logs[-4000:]
    assert not [line for line in val if not line.startswith("INFO ")], logs[-4000:]
    assert "WRONG-RC 1" in logs, logs[-4000:]
    wrong = [line.removeprefix("WRONG-LOG ") for line in logs.splitlines() if line.startswith("WRONG-LOG ")]
    assert wrong == [  # the whole output of the failed `rig train`
        "ERROR rig: /tmp/empty/data.yaml: its path: /datasets/made-elsewhere does not exist, and its own "
        "folder /tmp/empty holds no images/train either: set path: to the dataset's folder, or remove "
        "path: and keep data.yaml in the dataset's folder",
    ], logs[-4000:]
