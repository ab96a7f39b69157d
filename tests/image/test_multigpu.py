"""Multi-GPU correctness without a GPU: the paths a GPU server takes, run for real in the image on the
CPU (torchrun with gloo, fake sysfs trees, CUDA_VISIBLE_DEVICES games, a patched init_process_group).

Each test here failed on the code before the fix it guards (see the closing note of the issue).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.fakesys import FakeSys, bus
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

GPU_PROBE = (SCRIPTS / "gpu_env_probe.py").read_text()

# A rank that needs longer than torchrun's own 30 s to save after SIGTERM.
SLOW_SAVER = (SCRIPTS / "slow_saver.py").read_text()


def _tree(tmp_path: Path, gpus: int) -> tuple[Path, list[str]]:
    fs = FakeSys(tmp_path / "sys").node(0, "0-1").online("0-1").cpuset("0-1")
    ids = [bus(i) for i in range(gpus)]
    for b in ids:
        fs.gpu(b, 0, "0-1")
    (tmp_path / "probe.py").write_text(GPU_PROBE)
    (tmp_path / "saver.py").write_text(SLOW_SAVER)
    (tmp_path / "out").mkdir()
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o644)
    return tmp_path, ids


def _probes(logs: str) -> list[dict[str, Any]]:
    found = [json.loads(line[6:]) for line in logs.splitlines() if line.startswith("PROBE ")]
    return sorted(found, key=lambda p: int(p["LOCAL_RANK"]))


# ---- 2: `rig launch --gpus 0,2` uses GPUs 0 and 2 ---------------------------------------------------------
@pytest.mark.parametrize(
    ("container_cvd", "expected"), [(None, "0,2"), ("5,6,7", "5,7")], ids=["all-visible", "visible-5-6-7"]
)
def test_rig_launch_gpus_0_2_gives_each_rank_its_gpu(
    containers: Containers, tmp_path: Path, container_cvd: str | None, expected: str
) -> None:
    root, ids = _tree(tmp_path, 3)
    topo = f"--sysfs-root /fake/sys --gpu-bus-ids {','.join(ids)}"
    env = {"MASTER_PORT": "29531", **({"CUDA_VISIBLE_DEVICES": container_cvd} if container_cvd else {})}
    rc, logs = containers.oneshot(
        ["bash", "-c", f"rig launch --gpus 0,2 {topo} -- python /fake/probe.py"],
        timeout=120,
        volumes={str(root): {"bind": "/fake", "mode": "rw"}},
        environment=env,
    )
    assert rc == 0, logs
    probes = _probes(logs)
    # cuda:LOCAL_RANK, what torchrun programs use, is the rank's GPU: rank 1 gets GPU 2, not GPU 1.
    assert probes == [
        {
            "LOCAL_RANK": "0",
            "CUDA_VISIBLE_DEVICES": expected,
            "RIG_CUDA_DEVICE": "0",
            "RIG_GPU_BUS_ID": ids[0],
        },
        {
            "LOCAL_RANK": "1",
            "CUDA_VISIBLE_DEVICES": expected,
            "RIG_CUDA_DEVICE": "1",
            "RIG_GPU_BUS_ID": ids[2],
        },
    ], logs


# ---- 3: the ranks' deadline follows the environment's grace, not torchrun's 30 s ----------------------
def test_torchrun_gives_the_ranks_the_stop_grace(containers: Containers, tmp_path: Path) -> None:
    root, ids = _tree(tmp_path, 2)
    topo = f"--sysfs-root /fake/sys --gpu-bus-ids {','.join(ids)}"
    c = containers.run(
        ["bash", "-c", f"exec rig launch --gpus 2 {topo} -- python /fake/saver.py /fake/out"],
        volumes={str(root): {"bind": "/fake", "mode": "rw"}},
        environment={"MASTER_PORT": "29533", "RIG_STOP_GRACE": "60"},
        stop_signal="SIGTERM",
    )
    wait_until(lambda: c.logs().decode().count("READY") == 2, timeout=90, interval=0.5)
    started = time.monotonic()
    c.kill(signal="SIGTERM")  # what `docker stop` sends; tini passes it to torchrun
    status = c.wait(timeout=120)
    took = time.monotonic() - started
    saved = sorted(p.name for p in (root / "out").iterdir())
    assert saved == ["saved-0", "saved-1"], (took, c.logs().decode()[-3000:])
    assert took >= 30, took  # torchrun's own deadline would have killed both at 30 s
    assert status["StatusCode"] != 137, c.logs().decode()[-3000:]


def test_torchrun_shim_replaces_the_30_s_in_torch_itself(containers: Containers) -> None:
    code = (SCRIPTS / "torchrun_stop_timeout.py").read_text()
    rc, out = containers.oneshot(["python", "-c", code], timeout=120)
    assert rc == 0, out
    assert "SEEN [30, 75, 120]" in out, out


# ---- 3: Ctrl-C and a hangup stop a run cleanly, like SIGTERM -------------------------------------------
@pytest.mark.parametrize("sig", ["INT", "HUP"])
def test_ctrl_c_and_hangup_keep_the_epoch(containers: Containers, sig: str) -> None:
    c = containers.run(["sleep", "900"], environment={"RIG_USER": "root"})
    rc, out = containers.exec(c, "rig demo-data /tmp/demo --train 48 --val 8 --imgsz 160", 120)
    assert rc == 0, out
    args = "device=cpu data=/tmp/demo/data.yaml model=yolo11n.yaml imgsz=160 batch=4 epochs=3"
    start = f"(sh -c 'echo $$ > /tmp/pid; exec rig train {args} project=/tmp/runs name=t plots=False';"
    start += " echo $? > /tmp/rc) > /tmp/t.log 2>&1 &"
    assert containers.exec(c, start, 30)[0] == 0
    wait_until(
        lambda: containers.exec(c, "grep -q 'Starting training for' /tmp/t.log", 10)[0] == 0, timeout=240
    )
    containers.exec(c, f"kill -{sig} $(cat /tmp/pid)", 10)
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=120, interval=1)
    log = containers.exec(c, "cat /tmp/t.log", 10)[1]
    number = getattr(signal, f"SIG{sig}")
    assert containers.exec(c, "cat /tmp/rc", 10)[1].strip() == str(128 + number), log
    assert f"stop requested (signal {number}): saving at this batch boundary" in log, log
    assert "DataLoader worker" not in log, log  # the loader's workers (2: the container's CPUs) outlived it
    assert f"stopped by signal {number}; kept /tmp/runs/t/weights/last.pt" in log, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert containers.exec(c, "test -f /tmp/runs/t/weights/last.pt", 10)[0] == 0


# ---- 4: the process group: our timeout, no blocking wait ------------------------------------------------
def test_the_trainer_sets_up_the_process_group_with_rig_nccl_timeout(containers: Containers) -> None:
    code = (SCRIPTS / "trainer_process_group.py").read_text()
    env = {"RIG_NCCL_TIMEOUT": "120", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}
    env["TORCH_NCCL_BLOCKING_WAIT"] = "1"
    env.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
    rc, out = containers.oneshot(["python", "-c", code], timeout=120, environment=env)
    assert rc == 0, out
    # On this CPU box the group is gloo; Ultralytics' own would be 10800 s with a blocking wait.
    # TORCH_NCCL_ASYNC_ERROR_HANDLING stays torch's default (unset: 3, abort without clean-up).
    assert "DDP gloo 120 3 4 None None" in out, out


# ---- 11: offline, the AMP check never waits on the network ------------------------------------------
def test_offline_amp_check_is_skipped_without_its_weights(containers: Containers) -> None:
    code = (SCRIPTS / "offline_amp_check.py").read_text()
    rc, out = containers.oneshot(["python", "-c", code], timeout=120)
    assert rc == 0, out
    assert "AMP True" in out and "AMP check skipped: offline and no /weights/yolo26n.pt" in out, out
