"""The launcher in the image: real torchrun jobs through the binder, two nodes, training on the CPU.

"GPUs" come from fake sysfs trees (--sysfs-root/--gpu-bus-ids), so torchrun, the binder and the
multi-node rendezvous run for real on this CPU-only box; the ranks talk over gloo.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS, composenodes
from tests.helpers.compose import take_down
from tests.helpers.containers import Containers, free_port
from tests.helpers.fakesys import FakeSys, bus
from tests.helpers.names import unique
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

PROBE = (SCRIPTS / "rank_probe.py").read_text()


def _readable(path: Path) -> None:
    """The container runs as user yolo; pytest's tmp dirs are private."""
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of a 2-CPU, 1-node box with 2 GPUs on node 0, plus the probe program."""
    fs = FakeSys(tmp_path / "sys").node(0, "0-1").online("0-1").cpuset("0-1")
    ids = [bus(0), bus(1)]
    for b in ids:
        fs.gpu(b, 0, "0-1")
    (tmp_path / "probe.py").write_text(PROBE)
    _readable(tmp_path)
    return tmp_path, ids


def _probes(logs: str) -> list[dict[str, Any]]:
    return sorted(
        (json.loads(line[6:]) for line in logs.splitlines() if line.startswith("PROBE ")),
        key=lambda p: int(p["env"]["RANK"]),
    )


def _mounts(root: Path) -> dict[str, dict[str, str]]:
    return {str(root): {"bind": "/fake", "mode": "ro"}}


@pytest.mark.parametrize("sys_nice", [False, True], ids=["default-seccomp", "cap-sys-nice"])
def test_two_cpu_ranks_through_torchrun_and_the_binder_match_the_plan(
    containers: Containers, box: tuple[Path, list[str]], sys_nice: bool
) -> None:
    root, ids = box
    topo = f"--sysfs-root /fake/sys --gpu-bus-ids {','.join(ids)}"
    script = f"rig plan --json {topo} && rig launch --gpus 2 {topo} -- python /fake/probe.py"
    rc, logs = containers.oneshot(
        ["bash", "-c", script],
        timeout=120,
        volumes=_mounts(root),
        cpuset_cpus="0-1",
        cap_add=["SYS_NICE"] if sys_nice else None,
        environment={"MASTER_PORT": "29517"},
    )
    assert rc == 0, logs
    plan = json.loads(next(line for line in logs.splitlines() if line.startswith("[")))
    probes = _probes(logs)
    assert len(probes) == 2, logs
    for rank in probes:
        expected = plan[int(rank["env"]["LOCAL_RANK"])]
        assert rank["affinity"] == expected["cpus"]
        assert rank["env"]["RIG_CPUS"] == ",".join(map(str, expected["cpus"]))
        assert rank["env"]["OMP_NUM_THREADS"] == str(len(expected["cpus"]))
        assert rank["env"]["RIG_GPU_BUS_ID"] == expected["gpu_bus_id"]
        assert rank["env"]["RIG_MEM_NODE"] == str(expected["mem_node"])
        assert rank["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert rank["env"]["WORLD_SIZE"] == "2" and rank["sum"] == 3.0
    assert [p["affinity"] for p in probes] == [[0], [1]]
    warnings = [line for line in logs.splitlines() if line.startswith("WARNING")]
    if sys_nice:
        assert all(p["mempolicy"] == [1, 1] for p in probes), probes  # MPOL_PREFERRED on node 0
        assert warnings == [], warnings
    else:
        # Docker's seccomp refuses set_mempolicy: CPUs still bound, and one warning says how to fix it.
        assert len(warnings) == 1 and "cap_add: [SYS_NICE]" in warnings[0], warnings


# What listens while two gloo ranks run: every TCP socket in LISTEN state, from /proc/net/tcp{,6}.
LISTENERS = (SCRIPTS / "rank_listeners.py").read_text()


def test_a_single_node_job_listens_on_the_loopback_only(
    containers: Containers, box: tuple[Path, list[str]]
) -> None:
    """torchrun's store and the gloo ranks of a one-node job: nothing another container on the
    network could reach (--standalone's store listened on every interface, gloo on the container's
    address)."""
    root, ids = box
    (root / "listeners.py").write_text(LISTENERS)
    (root / "listeners.py").chmod(0o644)
    topo = f"--sysfs-root /fake/sys --gpu-bus-ids {','.join(ids)}"
    rc, logs = containers.oneshot(
        ["bash", "-c", f"rig launch --gpus 2 {topo} -- python /fake/listeners.py"],
        timeout=120,
        volumes=_mounts(root),
        cpuset_cpus="0-1",
    )
    assert rc == 0, logs
    seen = [json.loads(line[7:]) for line in logs.splitlines() if line.startswith("LISTEN ")]
    assert len(seen) == 2 and all(seen), logs
    addresses = {entry.rsplit(":", 1)[0] for ranks in seen for entry in ranks}
    assert addresses <= {"127.0.0.1", "::1"}, seen


def test_two_containers_rendezvous_as_two_nodes(box: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Two compose services on the project's network rendezvous (static, gloo) as two nodes, and
    global rank 0 (checkpoints, telemetry, the run directory) is on NODE_RANK=0.

    The arrangement would put rank 0 on the wrong node under c10d, which orders nodes by host name
    and pid: node 1 starts first and its host name sorts first (both names resolve, so c10d would
    not hang, it would just mix the nodes up).
    """
    root, ids = box
    cmd = ["rig", "launch", "--gpus", "1", "--sysfs-root", "/fake/sys", "--gpu-bus-ids", ids[0]]
    cmd += ["--", "python", "/fake/probe.py"]
    service = {"command": cmd, "cpuset": "0-1", "volumes": [f"{root}:/fake:ro"]}
    hostnames = {0: "node-b", 1: "node-a"}
    per_node = {
        f"node{r}": {"hostname": h, "networks": {"default": {"aliases": [h]}}} for r, h in hostnames.items()
    }
    nodes = composenodes.nodes(service, 29400, **per_node)
    nodes["node0"]["depends_on"] = ["node1"]  # node 1 joins first
    ran = composenodes.run(nodes, tmp_path, kind="launch", timeout=240)
    logs = ran.all_logs
    assert ran.up.returncode == 0, ran.up.stdout + ran.up.stderr
    assert ran.states == [("node0", "0"), ("node1", "0")], logs
    probes = _probes(logs)
    assert [p["env"]["RANK"] for p in probes] == ["0", "1"], logs
    assert all(p["env"]["WORLD_SIZE"] == "2" and p["sum"] == 3.0 for p in probes), logs
    assert [p["host"] for p in probes] == [hostnames[0], hostnames[1]], logs  # rank 0 on NODE_RANK=0
    assert "--rdzv-backend static" in logs


RUN_DIRS = (SCRIPTS / "run_dirs.py").read_text()


def test_run_directories_are_named_as_the_pinned_ultralytics_names_them(containers: Containers) -> None:
    # rig train decides the run directory before the ranks start; Ultralytics' own naming, so a
    # later plain `yolo train` continues the same sequence.
    rc, out = containers.oneshot(["python", "-c", RUN_DIRS], timeout=120)
    assert rc == 0, out
    line = next(line for line in out.splitlines() if line.startswith("RUNDIRS "))
    assert json.loads(line[8:]) == [["train", "train"], ["train-2", "train-2"], ["train-3", "train-3"]], out


def test_bad_input_in_the_image_is_one_line_and_dry_run_prints_the_command(
    containers: Containers, box: tuple[Path, list[str]]
) -> None:
    root, ids = box
    topo = f"--sysfs-root /fake/sys --gpu-bus-ids {','.join(ids)}"
    c = containers.run(["sleep", "300"], volumes=_mounts(root))
    # The entrypoint records yolo's ids at start: wait for it, so only `rig train` can write below.
    wait_until(lambda: containers.exec(c, "test -s /var/lib/rig/yolo-ids", 10)[0] == 0, timeout=60)
    find = "find / -xdev -newer /tmp/mark -type f 2>/dev/null | wc -l"
    for args, message in [
        ("--gpus 2 data=x.yaml", "no GPU is visible"),  # the real /sys of this box
        (f"{topo} --gpus 3 data=x.yaml", "only 2 GPU(s) are visible"),
        (f"{topo} --gpus 2 data=x.yaml batch=7", "not divisible by the 2 ranks"),
    ]:
        script = f"touch /tmp/mark; rig train {args}; echo rc=$?; {find}"
        rc, out = containers.exec(c, script, 60, user="yolo")  # as the documented `exec -u yolo`
        lines = [line for line in out.splitlines() if line.strip()]
        assert lines[0].startswith("ERROR rig: ") and message in lines[0], out
        assert lines[1:] == ["rc=1", "0"], out  # nothing launched, no file written anywhere
    # Root (a plain `docker exec`) in yolo's /workspace: one line naming the way in, nothing written.
    rc, out = containers.exec(
        c, f"touch /tmp/mark; rig train {topo} --gpus 2 data=x.yaml; echo rc=$?; {find}", 60
    )
    lines = [line for line in out.splitlines() if line.strip()]
    assert "/workspace belongs to uid 1000 (yolo)" in lines[0] and "exec -u yolo" in lines[0], out
    assert lines[1:] == ["rc=1", "0"], out
    rc, out = containers.exec(
        c,
        f"rig train {topo} --gpus 2 --dry-run data=/fake/d.yaml model=yolo11n.yaml batch=8 epochs=1",
        90,
        user="yolo",
    )
    assert rc == 0, out
    command = out.strip().splitlines()[-1]
    loopback = r"--rdzv-backend static --rdzv-id single --master-addr 127\.0\.0\.1 --master-port 0"
    assert re.search(r"-P -m rig\.launch\.torchrun --nnodes 1 --node-rank 0 " + loopback, command), out
    assert "-m rig.launch.binder --plan" in command and "-m rig.launch.trainer" in command
    assert "device=0,1" in command


def test_make_train_on_a_cpu_only_box_names_the_gpu_fix() -> None:
    # A project of its own, so the test neither touches nor leaves behind the user's volumes.
    project = unique("launch")
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project}
    image_name = os.environ.get("IMAGE", "yolo-rig:cu121").split(":")[0]
    try:
        result = subprocess.run(
            ["make", "-s", "train", "GPUS=2", f"IMAGE={image_name}", f"TRAIN_METRICS_PORT={free_port()}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    finally:
        take_down(project)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    errors = [line for line in out.splitlines() if line.startswith("ERROR rig: ")]
    assert len(errors) == 1 and "NVIDIA container toolkit" in errors[0] and "reservations" in errors[0], out
