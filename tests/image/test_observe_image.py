"""Observability in the built image: `rig doctor` on a real container, telemetry in real runs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from rig import versions
from rig.observe import doctor

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.waiting import wait_until

MOUNT = {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}

pytestmark = pytest.mark.image


def doctor_json(containers: Containers, *args: str, **kwargs: Any) -> tuple[int, dict[str, Any], str]:
    rc, logs = containers.oneshot(["rig", "doctor", "--json", *args], timeout=120, stderr=False, **kwargs)
    return rc, json.loads(logs), logs


def checks_of(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.stack
def test_doctor_json_lists_every_check_and_fails_without_gpus(containers: Containers) -> None:
    rc, report, _ = doctor_json(containers, shm_size="1g")
    names = [c["name"] for c in report["checks"]]
    assert names == [c.name for c in doctor.run_checks(doctor.Facts())] and len(names) == len(doctor.CHECKS)
    assert all(c["status"] in {s.value for s in doctor.Status} and c["detail"] for c in report["checks"])
    checks = checks_of(report)
    assert checks["gpus"]["status"] == "fail"
    assert "NVIDIA Container Toolkit" in checks["gpus"]["fix"]
    assert checks["driver"]["status"] == "fail"
    # The image's stack decides the driver it needs; no GPU: no compute capability to check.
    s = versions.stack_named(containers.client.images.get(containers.image).labels["io.yolo-rig.stack"])
    assert s is not None and f">= {s.min_driver}" in checks["driver"]["fix"]
    assert checks["kernels"]["status"] == "skip"
    assert checks["shm"]["status"] == "pass"  # 1 GiB holds this 2-CPU box's loader workers
    # No RDMA device here: one node needs none, several would get sockets; the image's libibverbs is
    # found (without it the reason would be the missing library).
    fabric = checks["fabric"]
    assert fabric["status"] == "pass", fabric
    assert fabric["detail"].startswith("one node (NVLink/PCIe within it); several would use NCCL between")
    assert "over TCP sockets (no InfiniBand/RoCE device in /sys/class/infiniband)" in fabric["detail"]
    assert "NCCL picks eth0 (NCCL_SOCKET_IFNAME unset)" in fabric["detail"], fabric
    assert (rc, report["ok"]) == (1, False)


def test_doctor_warns_about_a_64_mib_shm(containers: Containers) -> None:
    _, report, _ = doctor_json(containers, shm_size="64m")
    shm = checks_of(report)["shm"]
    assert shm["status"] == "warn"
    assert "/dev/shm is 64 MiB" in shm["detail"]
    assert "ipc: host" in shm["fix"] and "shm_size" in shm["fix"]


def test_doctor_text_report_prints_each_fix(containers: Containers) -> None:
    rc, logs = containers.oneshot(["rig", "doctor"], timeout=120, shm_size="64m")
    lines = logs.splitlines()
    assert rc == 1
    shm = next(i for i, line in enumerate(lines) if line.startswith("warn  shm"))
    assert lines[shm + 1].strip().startswith("fix: give the container a bigger /dev/shm")
    assert lines[-1].startswith("rig doctor: ") and "2 fail" in lines[-1]


def test_doctor_checks_a_dataset(containers: Containers) -> None:
    _, logs = containers.oneshot(
        [
            "bash",
            "-c",
            "rig demo-data /tmp/demo >/dev/null 2>&1 && rig doctor --json --data /tmp/demo/data.yaml",
        ],
        timeout=120,
        stderr=False,
    )
    checks = checks_of(json.loads(logs))
    assert checks["dataset"]["status"] == "pass" and "64 train images" in checks["dataset"]["detail"]
    assert checks["read_speed"]["status"] in ("pass", "warn") and "img/s" in checks["read_speed"]["detail"]
    assert checks["cache_ram"]["status"] == "pass"
    assert checks["bench"]["status"] == "skip"


def test_doctor_fails_a_missing_dataset(containers: Containers) -> None:
    rc, report, _ = doctor_json(containers, "--data", "/datasets/nope.yaml")
    assert rc == 1
    dataset = checks_of(report)["dataset"]
    assert dataset["status"] == "fail" and "not found" in dataset["detail"]
    assert dataset["fix"]


def fake_gpus_result(logs: str) -> dict[str, Any]:
    """telemetry_fake_gpus.py's JSON line; docker's logs may put a stderr line after it."""
    return json.loads(next(line for line in reversed(logs.splitlines()) if line.startswith('{"event_files"')))


def test_telemetry_writes_tensorboard_event_files(containers: Containers) -> None:
    rc, logs = containers.oneshot(
        ["python", "/tests/telemetry_fake_gpus.py"], timeout=120, volumes=MOUNT, network_mode="none"
    )
    assert rc == 0, logs
    out = fake_gpus_result(logs)
    assert len(out["event_files"]) == 1 and out["event_files"][0].startswith("events.out.tfevents.")
    assert {f"gpu{i}/util_pct" for i in (0, 1)} <= set(out["tags"])
    assert "train/data_wait_share" in out["tags"]
    # TensorBoard reads back exactly what the CSV holds; the summary is the CSV's mean.
    util = out["csv_util"]["gpu1"]
    assert out["tb_util"]["gpu1"] == util and util
    gpu1 = out["summary"]["gpus"][1]
    assert gpu1["mean_util_pct"] == pytest.approx(sum(util) / len(util))
    # The fake GPU fails after 20 reads: later rows are blank, the run went on; the first failure said
    # when it happened, the count and the last at the end of the run.
    assert out["csv_rows"] > gpu1["samples"]
    nvml_lines = [line for line in logs.splitlines() if "NVML error" in line]
    assert len(nvml_lines) == 2, nvml_lines
    assert (
        nvml_lines[0].startswith("INFO telemetry: NVML error on GPU ") and "the run goes on" in nvml_lines[0]
    )
    assert re.match(r"INFO telemetry: telemetry sampling failed \d+ times: NVML error on GPU ", nvml_lines[1])


def test_telemetry_samples_the_runs_gpus_numbered_as_the_user_numbers_them(containers: Containers) -> None:
    # Two GPUs in the box, CUDA_VISIBLE_DEVICES=1: the run's only GPU is the H100, and it is cuda:0.
    rc, logs = containers.oneshot(
        ["python", "/tests/telemetry_fake_gpus.py"],
        timeout=120,
        volumes=MOUNT,
        network_mode="none",
        environment={"CUDA_VISIBLE_DEVICES": "1"},
    )
    assert rc == 0, logs
    out = fake_gpus_result(logs)
    assert [(g["index"], g["name"]) for g in out["summary"]["gpus"]] == [(0, "NVIDIA H100")], logs
    assert list(out["csv_util"]) == ["gpu0"] and set(out["csv_util"]["gpu0"]) <= {70.0, 90.0}
    assert list(out["tb_util"]) == ["gpu0"]
    assert "INFO telemetry: GPU 0 (NVIDIA H100): mean utilisation " in logs


@pytest.mark.slow
def test_tiny_cpu_training_run_records_telemetry(containers: Containers) -> None:
    rc, logs = containers.oneshot(
        ["python", "/tests/telemetry_train.py"], timeout=300, volumes=MOUNT, network_mode="none"
    )
    assert rc == 0, logs[-3000:]
    out = json.loads(logs.splitlines()[-1])
    assert out["header"] == ["time", "elapsed_s", "steps", "data_wait_s", "step_s"]  # no GPU: no GPU columns
    summary = out["summary"]
    assert summary["steps"] == 2  # 8 images at batch 4, one epoch
    assert 0 < summary["data_wait_share"] < 1
    assert summary["gpus"] == [] and "NVML" in summary["nvml"]
    assert out["run_dir"].endswith("/runs/tiny")
    assert "train/data_wait_share" in out["tags"]
    telemetry_lines = [line for line in logs.splitlines() if " telemetry: " in line]
    assert len(telemetry_lines) == 2, telemetry_lines  # no NVML, then the summary
    assert all(line.startswith("INFO ") for line in telemetry_lines)
    assert telemetry_lines[1].startswith("INFO telemetry: no GPU sampled; data wait ")


def test_gpu_monitors_start_cleanly_without_a_gpu(containers: Containers) -> None:
    rc, logs = containers.oneshot(["nvitop", "--version"], timeout=60)
    assert rc == 0 and "nvitop" in logs.lower()
    rc, logs = containers.oneshot(["gpustat", "--version"], timeout=60)
    assert rc == 0 and "gpustat" in logs.lower()
    for no_gpu in (["gpustat"], ["nvitop", "--once"]):
        rc, logs = containers.oneshot(no_gpu, timeout=60)
        assert rc == 1 and "NVML" in logs and "Traceback" not in logs, logs


@pytest.mark.slow
def test_rig_train_records_telemetry_in_its_run_directory(containers: Containers) -> None:
    script = (
        "rig demo-data /tmp/demo --train 8 --val 2 --imgsz 64 >/dev/null 2>&1 && cd /tmp && "
        "rig train data=/tmp/demo/data.yaml model=yolo11n.yaml epochs=1 imgsz=64 batch=4 device=cpu "
        "plots=False project=/tmp/runs name=t && cat /tmp/runs/t/telemetry_summary.json && "
        "head -1 /tmp/runs/t/telemetry.csv && ls /tmp/runs/t/telemetry"
    )
    rc, logs = containers.oneshot(["bash", "-c", script], timeout=300, network_mode="none", shm_size="1g")
    assert rc == 0, logs[-3000:]
    summary = json.loads(logs[logs.index('{\n  "duration_s"') : logs.index("}\ntime,") + 1])
    assert summary["steps"] == 2 and 0 < summary["data_wait_share"] < 1
    assert "\ntime,elapsed_s,steps,data_wait_s,step_s\nevents.out.tfevents." in logs
    assert "INFO telemetry: no GPU sampled; data wait " in logs


def test_gpu_monitors_are_on_path_in_login_shells(containers: Containers) -> None:
    # SSH sessions and Jupyter terminals are login shells of user yolo in the running workstation.
    c = containers.run(shm_size="1g")
    wait_until(lambda: containers.exec(c, "test -s /etc/profile.d/rig-env.sh", 10)[0] == 0, timeout=60)
    rc, out = containers.exec(c, "su - yolo -c 'command -v nvitop gpustat; gpustat'", 30)
    assert "/opt/venv/bin/nvitop\n/opt/venv/bin/gpustat\n" in out, out
    assert rc == 1 and "NVML Shared Library Not Found" in out and "Traceback" not in out
