"""The speed levers in the image, offline, as yolo: torch.compile works (and says what it costs on the
CPU), `rig bench --compile` measures it, SyncBatchNorm converts the trainer's model and nothing saved
keeps it. The CPU's compile is slow (minutes for YOLO11n): each compile here is of the smallest detection
model Ultralytics builds (tests/scripts/tiny_detect.yaml: three convolutions and a Detect head), which
takes Ultralytics' whole training path as YOLO11n does."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers

pytestmark = pytest.mark.image

DEMO = "rig demo-data /tmp/demo --train 16 --val 4 --imgsz 64 >/dev/null"
TINY = "/tests/tiny_detect.yaml"  # tests/scripts/ mounted at /tests
SCRIPTS_RO = {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}


def test_torch_compile_runs_offline_as_yolo_into_the_cache(containers: Containers) -> None:
    script = (
        "import torch; f = torch.compile(lambda x: (x.sin() + x.cos()).sum()); "
        "print('SUM', round(f(torch.ones(8)).item(), 4))"
    )
    cmd = f'id -un; python -c "{script}" && find /cache/torch/inductor -name "*.so" | head -1'
    rc, logs = containers.oneshot(["bash", "-c", cmd], timeout=300, network_mode="none")
    assert rc == 0, logs[-3000:]
    assert logs.splitlines()[0] == "yolo"
    assert "SUM 11.0542" in logs  # 8 * (sin 1 + cos 1)
    assert re.search(r"^/cache/torch/inductor/.*\.so$", logs, re.MULTILINE), logs[-2000:]


def test_a_cpu_run_with_compile_warns_once_and_completes(containers: Containers) -> None:
    cmd = (
        f"{DEMO} && rig train device=cpu compile=True data=/tmp/demo/data.yaml model={TINY} "
        "epochs=1 imgsz=64 batch=16 plots=False project=/tmp/runs name=c && ls /tmp/runs/c/weights/last.pt"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", cmd], timeout=1200, network_mode="none", shm_size="1g", volumes=SCRIPTS_RO
    )
    assert rc == 0, logs[-3000:]
    rig_warnings = [line for line in logs.splitlines() if line.startswith("WARNING launch:")]
    assert len(rig_warnings) == 1, logs[-3000:]
    assert "compile=True on the CPU: measured" in rig_warnings[0] and "slower" in rig_warnings[0]
    assert "compile: starting torch.compile" in re.sub(r"\x1b\[[0-9;]*m", "", logs)  # passed on, not dropped
    assert "/tmp/runs/c/weights/last.pt" in logs


def test_bench_compile_reports_the_compiled_step_beside_the_eager_one(containers: Containers) -> None:
    cmd = (
        f"rig bench --quick --compile --model {TINY} --imgsz 64 --batch 4 --train-images 16"
        " --source-size 64x64 --json /tmp/b.json >&2 && cat /tmp/b.json"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", cmd], timeout=1200, network_mode="none", shm_size="1g", volumes=SCRIPTS_RO
    )
    assert rc == 0, logs[-3000:]
    res: dict[str, Any] = json.loads(logs[logs.rindex('{\n  "loader"') :])
    assert res["compile_used"] is True and res["compile_note"] is None, res
    assert res["step_eager_img_s"] > 0 and res["step_compiled_img_s"] > 0 and res["compile_s"] > 0
    # The step as training runs it: the compiled one, with the device tail's time per image charged.
    tail_s = (res["loader"]["device_tail_ms_per_image"] or 0.0) / 1000.0
    assert res["step_img_s"] == pytest.approx(1.0 / (1.0 / res["step_compiled_img_s"] + tail_s))
    assert "train step, compiled" in logs and "x eager; first step" in logs


def test_sync_bn_converts_the_trainers_model_and_no_checkpoint_keeps_it(containers: Containers) -> None:
    cmd = f"{DEMO} && python /tests/sync_bn_trainer.py"
    rc, logs = containers.oneshot(
        ["bash", "-c", cmd],
        timeout=300,
        network_mode="none",
        shm_size="1g",
        volumes=SCRIPTS_RO,
    )
    assert rc == 0, logs[-3000:]
    # Every BatchNorm2d of YOLO11n (81) is a SyncBatchNorm, its weights and running statistics kept.
    assert re.search(r"^MODEL 81 \['SyncBatchNorm'\] True True$", logs, re.MULTILINE), logs[-3000:]
    assert "EMA-MADE ['SyncBatchNorm']" in logs  # what Ultralytics' EMA copies
    assert re.search(r"^EMA \['BatchNorm2d'\] True$", logs, re.MULTILINE), logs[-3000:]
    assert "CKPT ['BatchNorm2d']" in logs
    # freeze=2: the frozen layers' norms stay in eval (Ultralytics only looks for BatchNorm2d).
    assert "FROZEN 2 training: 0 others training: True" in logs, logs[-3000:]
    # NaN recovery remakes the EMA from the SyncBatchNorm model: it and the next checkpoint are plain.
    assert "RECOVERED-EMA ['BatchNorm2d']" in logs and "RECOVERED-CKPT ['BatchNorm2d']" in logs, logs[-3000:]
    assert "FINETUNED" in logs  # the checkpoint fine-tunes on the CPU
    assert "sync_bn: 81 BatchNorm layers synchronised over the 2 ranks" in logs
    # compile=True beside it: one WARNING with the graph breaks SyncBatchNorm costs (issue 21 item 13).
    assert re.search(
        r"^WARNING trainer: sync_bn=True with compile=True: torch 2\.3\.1\S* does not compile SyncBatchNorm; "
        r"dynamo breaks the model's graph at each of its 81 SyncBatchNorm layers \(at least 81 graph breaks",
        logs,
        re.MULTILINE,
    ), logs[-3000:]


def test_the_fused_optimizer_lever_trains_the_same_losses_on_the_cpu(containers: Containers) -> None:
    # What users run: `rig train ... fused_optimizer=True|False`. On the CPU torch 2.3 has no fused SGD, so
    # the lever is the multi-tensor kernels; the same seed must give the same losses (within float noise).
    run = (
        f"rig train device=cpu data=/tmp/demo/data.yaml model={TINY} epochs=1 imgsz=64 batch=8 optimizer=SGD "
        "plots=False val=False project=/tmp/runs exist_ok=True workers=2"
    )
    cmd = (
        f"{DEMO} && {run} name=on fused_optimizer=True && {run} name=off fused_optimizer=False && "
        "tail -n 1 /tmp/runs/on/results.csv /tmp/runs/off/results.csv"
    )
    rc, logs = containers.oneshot(
        ["bash", "-c", cmd], timeout=600, network_mode="none", shm_size="1g", volumes=SCRIPTS_RO
    )
    assert rc == 0, logs[-3000:]
    assert "INFO launch: fused_optimizer: on: fused_optimizer=True as given" in logs
    assert "INFO launch: fused_optimizer: off: fused_optimizer=False as given" in logs
    assert re.search(
        r"^INFO trainer: fused_optimizer: SGD on multi-tensor \(foreach\) kernels: no fused SGD kernel "
        r"\(cpu, torch 2\.3\.1\S*\)$",
        logs,
        re.MULTILINE,
    ), logs[-3000:]
    assert logs.count("INFO trainer: fused_optimizer:") == 1  # off: Ultralytics' optimizer, untouched
    rows = re.findall(r"^\s*1,([^\n]+)$", logs, re.MULTILINE)  # epoch 1 of each results.csv
    assert len(rows) == 2, logs[-2000:]
    on, off = ([float(v) for v in row.split(",")[1:4]] for row in rows)  # box, cls, dfl train losses
    assert on == pytest.approx(off, rel=1e-4), (on, off)
