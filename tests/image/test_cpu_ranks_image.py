"""CPU ranks in the image: real DDP over gloo through rig's torchrun, binder and trainer.

`rig train device=cpu --cpu-ranks N` runs the multi-GPU path on CPUs, so these tests exercise the
process group, the stop agreement, the batch split, the final validation and the exit codes for
real: two ranks in one container, two containers as two nodes, stops, resume=auto under Slurm's
variables. Tiny runs: 16 images at 64 px, batch 4 over 2 ranks (4 batches of 2 per rank an epoch).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.containers import Containers
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

DEMO = "rig demo-data /tmp/demo --train 16 --val 8 --imgsz 64 >/dev/null"
ARGS = "device=cpu data=/tmp/demo/data.yaml model=yolo11n.yaml imgsz=64 batch=4 plots=False"
# The epoch, the stop mark and early stopping's state of each checkpoint.
CHECKPOINTS = (SCRIPTS / "checkpoint_epochs.py").read_text()


def _epochs(containers: Containers, c: Any, run: str) -> list[int]:
    _, out = containers.exec(c, f"tail -n +2 {run}/results.csv 2>/dev/null | cut -d, -f1", 10)
    return [int(float(e)) for e in out.split()]


def _ranks_alive(containers: Containers, c: Any) -> list[str]:
    """The rank processes (the trainer's own argv; torchrun's argv names the trainer too)."""
    _, out = containers.exec(
        c, "ps -eo args | grep -E '^\\S*python\\S*( -\\S+)* -m rig.launch.(trainer|binder)' || true", 10
    )
    return [line for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_two_cpu_ranks_train_two_epochs_in_one_process_group(containers: Containers) -> None:
    script = (
        f"{DEMO} && rig train {ARGS} --cpu-ranks 2 epochs=2 project=/tmp/runs name=t; echo rc=$?; "
        "cut -d, -f1 /tmp/runs/t/results.csv; ls /tmp/runs/t/weights"
    )
    rc, logs = containers.oneshot(["bash", "-c", script], timeout=600, cpuset_cpus="0-1")
    assert rc == 0 and "rc=0" in logs, logs
    assert "INFO launch: world: 2 ranks = 1 node x 2 ranks per node (cpu, gloo)" in logs, logs
    assert "INFO trainer: process group: gloo, 2 ranks" in logs, logs  # both ranks joined it
    assert "batch=4" in logs and "--nproc-per-node 2" in logs and "-m rig.launch.binder" in logs
    tail = logs[logs.index("rc=0") :].split()
    assert tail[1:4] == ["epoch", "1", "2"] and "best.pt" in tail and "last.pt" in tail, logs
    assert "Validating /tmp/runs/t/weights/best.pt" in logs, logs  # the final validation, over gloo


@pytest.mark.slow
def test_two_containers_train_as_two_nodes_on_cpu_ranks(containers: Containers, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o777)
    rc, out = containers.oneshot(
        ["bash", "-c", "rig demo-data /data/demo --train 16 --val 8 --imgsz 64"],
        timeout=300,
        volumes={str(data): {"bind": "/data", "mode": "rw"}},
    )
    assert rc == 0, out
    train = f"rig train {ARGS.replace('/tmp/demo', '/data/demo')} epochs=2 project=/tmp/runs name=n"
    service = {
        "image": os.environ.get("IMAGE", "yolo-rig:cu121"),
        "pull_policy": "never",
        "cpuset": "0-1",
        "volumes": [f"{data}:/data:ro"],
    }
    nodes = {
        f"node{rank}": {
            **service,
            "hostname": f"node{rank}",
            "command": ["bash", "-c", f"{train} && (cut -d, -f1 /tmp/runs/n/results.csv || true)"],
            "environment": {
                "NNODES": "2",
                "NODE_RANK": str(rank),
                "MASTER_ADDR": "node0",
                "MASTER_PORT": "29431",
                "RDZV_ID": "cpu-ranks-test",  # by hand: the run's identity, so the nodes agree on its folder
                "RIG_NCCL_TIMEOUT": "300",  # a rank left waiting in a collective fails in minutes
            },
        }
        for rank in (0, 1)
    }
    compose_file = tmp_path / "compose.nodes.yaml"
    compose_file.write_text(json.dumps({"services": nodes}))
    project = f"cpuranks-test-{uuid.uuid4().hex[:8]}"
    compose = ["docker", "compose", "--ansi", "never", "-f", str(compose_file), "-p", project]
    try:
        up = subprocess.run([*compose, "up", "--no-color"], capture_output=True, text=True, timeout=900)
        logs = {
            node: re.sub(
                r"\x1b\[[0-9;]*[A-Za-z]",
                "",
                subprocess.run(
                    [*compose, "logs", "--no-color", "--no-log-prefix", node],
                    capture_output=True,
                    text=True,
                    timeout=60,
                ).stdout,
            )
            for node in nodes
        }
        states = subprocess.run(
            [*compose, "ps", "-a", "--format", "{{.Service}} {{.ExitCode}}"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.split()
    finally:
        subprocess.run([*compose, "down", "-v"], capture_output=True, timeout=120, check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    assert sorted(zip(states[::2], states[1::2], strict=True)) == [("node0", "0"), ("node1", "0")], logs
    for node in nodes:
        assert "INFO launch: world: 2 ranks = 2 nodes x 1 rank per node (cpu, gloo)" in logs[node], logs[node]
        assert "--rdzv-backend static" in logs[node]
    assert "INFO trainer: process group: gloo, 2 ranks" in logs["node0"], logs["node0"]  # global rank 0
    # node1 has no run directory of its own: every rank skips the final validation, none waits for it.
    assert "WARNING trainer: final validation skipped: /tmp/runs/n/weights/best.pt" in logs["node0"], logs
    assert logs["node0"].split()[-3:] == ["epoch", "1", "2"], logs["node0"]


@pytest.mark.slow
def test_resume_auto_under_slurm_trains_each_epoch_once(containers: Containers) -> None:
    """SIGTERM to `rig train` (torchrun) mid-epoch, the same command again with resume=auto and the
    same Slurm job id continues, once more it says the run is finished."""
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1", "RIG_USER": "root"}
    c = containers.run(["sleep", "1800"], environment=slurm, cpuset_cpus="0-1")
    assert containers.exec(c, DEMO, 120)[0] == 0
    run = "/tmp/runs/detect/train-slurm-4242"
    command = f"rig train {ARGS} --cpu-ranks 2 epochs=3 project=/tmp/runs/detect resume=auto"
    start = f"(sh -c 'echo $$ > /tmp/pid; exec {command}'; echo $? > /tmp/rc) > /tmp/t1.log 2>&1 &"
    assert containers.exec(c, start, 30)[0] == 0
    # Mid-epoch 2: one row written, and the next epoch's batches under way.
    wait_until(lambda: len(_epochs(containers, c, run)) >= 1, timeout=400, interval=1)
    containers.exec(c, "kill -TERM $(cat /tmp/pid)", 10)
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=300, interval=1)
    log = containers.exec(c, "cat /tmp/t1.log", 10)[1]
    assert containers.exec(c, "cat /tmp/rc", 10)[1].strip() == "143", log  # 128 + SIGTERM, through torchrun
    assert "Traceback" not in log and "stopped by signal 15" in log, log
    assert f"no last.pt in {run}: starting the run there" in log, log
    done = _epochs(containers, c, run)
    assert done == list(range(1, len(done) + 1)) and len(done) < 3, log
    rc, out = containers.exec(c, ["python", "-c", CHECKPOINTS, f"{run}/weights"], 120)
    ckpts = json.loads(out.strip().splitlines()[-1])
    epoch, stopped, best_epoch = ckpts["last.pt"]
    assert stopped and epoch == len(done) - 1, ckpts
    assert best_epoch <= epoch + 1, ckpts  # a stop is not an epoch for early stopping

    rc, log = containers.exec(c, f"{command} 2>&1", 900)
    assert rc == 0, log
    assert (
        f"resume=auto: continuing {run}/weights/last.pt after epoch {len(done)}/3 (saved by a stop)" in log
    ), log
    assert _epochs(containers, c, run) == [1, 2, 3], log  # each epoch once

    rc, log = containers.exec(c, f"{command} 2>&1", 300)
    assert rc == 0, log
    assert f"INFO train: resume=auto: {run} is finished" in log and "Executing" not in log, log


@pytest.mark.slow
def test_a_stop_only_one_rank_got_ends_every_rank_non_zero(containers: Containers) -> None:
    """SIGTERM to rank 1 alone (an evicted worker): rank 0 stops too, and exits 143 like it, so
    torchrun (which got no signal) exits 143 in one line, never 0 or a traceback."""
    c = containers.run(["sleep", "1800"], environment={"RIG_USER": "root"}, cpuset_cpus="0-1")
    assert containers.exec(c, DEMO, 120)[0] == 0
    command = f"rig train {ARGS} --cpu-ranks 2 epochs=30 project=/tmp/runs name=one"
    assert containers.exec(c, f"({command}; echo $? > /tmp/rc) > /tmp/t.log 2>&1 &", 30)[0] == 0
    wait_until(
        lambda: containers.exec(c, "grep -q 'Starting training for' /tmp/t.log", 10)[0] == 0, timeout=400
    )
    rank1 = "ps -eo pid,args | awk '/-m rig.launch.trainer/ && !/torchrun/ {print $1}' | tail -1"
    assert containers.exec(c, f"kill -TERM $({rank1})", 10)[0] == 0
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=400, interval=1)
    log = containers.exec(c, "cat /tmp/t.log", 10)[1]
    assert containers.exec(c, "cat /tmp/rc", 10)[1].strip() == "143", log
    assert "stopped by signal 15" in log, log  # said by rank 0, which got no signal itself
    assert "ranks stopped on signal 15" in log and "ChildFailedError" not in log, log


@pytest.mark.slow
def test_a_second_ctrl_c_ends_every_rank_at_once(containers: Containers) -> None:
    """Ctrl-C twice to torchrun (a terminal's Ctrl-C reaches it alone: the ranks lead sessions of
    their own): every rank is gone within seconds, not RIG_STOP_GRACE, and none outlives torchrun."""
    c = containers.run(
        ["sleep", "1800"], environment={"RIG_USER": "root", "RIG_STOP_GRACE": "600"}, cpuset_cpus="0-1"
    )
    assert containers.exec(c, DEMO, 120)[0] == 0
    command = f"rig train {ARGS} --cpu-ranks 2 epochs=30 project=/tmp/runs name=int"
    start = f"(sh -c 'echo $$ > /tmp/pid; exec {command}'; echo $? > /tmp/rc) > /tmp/t.log 2>&1 &"
    assert containers.exec(c, start, 30)[0] == 0
    wait_until(
        lambda: containers.exec(c, "grep -q 'Starting training for' /tmp/t.log", 10)[0] == 0, timeout=400
    )
    assert len(_ranks_alive(containers, c)) == 2
    # The first Ctrl-C: the ranks save at their next agreed check (10 batches); the second, now.
    containers.exec(c, "kill -INT $(cat /tmp/pid); sleep 1; kill -INT $(cat /tmp/pid)", 10)
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=120, interval=1)
    log = containers.exec(c, "cat /tmp/t.log", 10)[1]
    assert containers.exec(c, "cat /tmp/rc", 10)[1].strip() == "130", log
    assert "signal 2 again: killing the ranks now" in log, log
    assert _ranks_alive(containers, c) == [], log


@pytest.mark.slow
def test_no_rank_outlives_a_killed_torchrun(containers: Containers) -> None:
    """torchrun SIGKILLed (the OOM killer, a `docker kill` of it): its ranks, which lead sessions of
    their own, die with it instead of training on as orphans."""
    c = containers.run(["sleep", "1800"], environment={"RIG_USER": "root"}, cpuset_cpus="0-1")
    assert containers.exec(c, DEMO, 120)[0] == 0
    command = f"rig train {ARGS} --cpu-ranks 2 epochs=30 project=/tmp/runs name=kill"
    start = f"(sh -c 'echo $$ > /tmp/pid; exec {command}'; echo $? > /tmp/rc) > /tmp/t.log 2>&1 &"
    assert containers.exec(c, start, 30)[0] == 0
    wait_until(
        lambda: containers.exec(c, "grep -q 'Starting training for' /tmp/t.log", 10)[0] == 0, timeout=400
    )
    assert len(_ranks_alive(containers, c)) == 2
    containers.exec(c, "kill -KILL $(cat /tmp/pid)", 10)
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=60, interval=1)
    wait_until(lambda: _ranks_alive(containers, c) == [], timeout=60, interval=1)


def _in_rank_sessions(ps: str, ranks: set[str]) -> list[str]:
    """The processes of `ps -eo sid=,pid=,args=` in the ranks' sessions (a rank leads its own)."""
    return [line.strip() for line in ps.splitlines() if line.split()[:1] and line.split()[0] in ranks]


# A C++ compiler that takes ten minutes for each kernel (inductor's `cpp.cxx` comes from CXX; the
# name keeps g++ in it, as inductor picks its flags by the name): a kernel build in flight at the
# stop deadline, every time, as it is when a large model compiles.
SLOW_CXX = (
    "mkdir -p /tmp/slow && printf '%s\\n' '#!/bin/sh' "
    '\'case " $* " in *" -o "*) sleep 600 ;; esac\' \'exec /usr/bin/g++ "$@"\' > /tmp/slow/g++ '
    "&& chmod +x /tmp/slow/g++"
)


# A detection model of five convolutions: dynamo traces it in seconds, where YOLO11n takes minutes on
# two CPUs; the slow compiler keeps its first kernel build in flight all the same.
TINY_MODEL = (
    "printf '%s\\n' 'nc: 1' 'backbone:' '  - [-1, 1, Conv, [8, 3, 2]]' '  - [-1, 1, Conv, [8, 3, 2]]' "
    "'  - [-1, 1, Conv, [8, 3, 2]]' '  - [-1, 1, Conv, [8, 3, 2]]' '  - [-1, 1, Conv, [8, 3, 2]]' "
    "'head:' '  - [[2, 3, 4], 1, Detect, [nc]]' > /tmp/tiny.yaml"
)


@pytest.mark.slow
@pytest.mark.stack
def test_no_compile_worker_outlives_the_job(containers: Containers) -> None:
    """compile=True; the rank building a kernel is SIGKILLed alone (the OOM killer). torch closes the
    other rank through its process group (TERM, KILL at the deadline), compiler processes included,
    but skips the dead one: rig's torchrun kills what is left of its group. Nothing of either rank
    (g++, inductor's worker pool) is left the moment torchrun exits."""
    env = {
        "RIG_USER": "root",
        "RIG_STOP_GRACE": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "2",  # the pool, as a rank with several CPUs has it
        "CXX": "/tmp/slow/g++",
    }
    c = containers.run(["sleep", "1800"], environment=env, cpuset_cpus="0-1")
    assert containers.exec(c, f"{DEMO} && {SLOW_CXX} && {TINY_MODEL}", 120)[0] == 0
    args = ARGS.replace("model=yolo11n.yaml", "model=/tmp/tiny.yaml")
    command = f"rig train {args} --cpu-ranks 2 epochs=1 compile=True project=/tmp/runs name=cw"
    # What is left in the ranks' sessions the moment rig train (torchrun) has exited.
    ps = "ps -eo sid=,pid=,args="
    start = (
        f"(sh -c 'echo $$ > /tmp/pid; exec {command}'; rc=$?; {ps} > /tmp/left; echo $rc > /tmp/rc) "
        "> /tmp/t.log 2>&1 &"
    )
    assert containers.exec(c, start, 30)[0] == 0
    rank = "ps -eo pid=,args= | awk '/-m rig.launch.trainer/ && !/torchrun/ {print $1}'"
    ranks = set(wait_until(lambda: containers.exec(c, rank, 10)[1].split(), timeout=300))
    assert len(ranks) == 2

    def building() -> set[str]:
        lines = _in_rank_sessions(containers.exec(c, ps, 10)[1], ranks)
        return {line.split()[0] for line in lines if "/tmp/slow/g++" in line}

    # One rank builds the kernel, the other waits on inductor's lock for the same file.
    alone = min(wait_until(building, timeout=900, interval=1), key=int)
    assert containers.exec(c, f"kill -KILL {alone}", 10)[0] == 0
    wait_until(lambda: containers.exec(c, "test -s /tmp/rc", 10)[0] == 0, timeout=300, interval=1)
    left = _in_rank_sessions(containers.exec(c, "cat /tmp/left", 10)[1], ranks)
    log = containers.exec(c, "cat /tmp/t.log", 10)[1]
    assert containers.exec(c, "cat /tmp/rc", 10)[1].strip() not in {"", "0"}, log
    assert f"Signal 9 (SIGKILL) received by PID {alone}" in log, log
    assert left == [], "\n".join(left)  # nothing of either rank outlives torchrun


def test_the_static_rendezvous_gives_up_after_rig_rdzv_timeout(containers: Containers) -> None:
    """Node 0 of two, the other never comes: torchrun gives up after RIG_RDZV_TIMEOUT, not torch's 600 s."""
    env = {"NNODES": "2", "NODE_RANK": "0", "RDZV_ID": "r", "RIG_RDZV_TIMEOUT": "15"}
    # MASTER_ADDR: the container's own address (the loopback is refused for several nodes).
    script = (
        f"{DEMO} && MASTER_ADDR=$(hostname -i | cut -d' ' -f1) rig train {ARGS} --cpu-ranks 1 epochs=1 "
        "project=/tmp/runs; echo rc=$?"
    )
    _, logs = containers.oneshot(["bash", "-c", script], timeout=300, environment=env)
    assert "--rdzv-conf timeout=15" in logs, logs
    assert "rc=0" not in logs and "rc=" in logs, logs
