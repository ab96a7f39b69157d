"""CPU ranks in the image: real DDP over gloo through rig's torchrun, binder and trainer.

`rig train device=cpu --cpu-ranks N` runs the multi-GPU path on CPUs, so these tests exercise the
process group, the stop agreement, the batch split, the final validation and the exit codes for
real: two containers as two nodes, a stop one rank got, a second Ctrl-C, a killed torchrun (two
ranks in one container train, stop and resume in test_stops.py). Tiny runs: 16 images at 64 px,
batch 4 over 2 ranks (4 batches of 2 per rank an epoch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCRIPTS, composenodes
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


# The ranks' pids: processes running the binder or the trainer (torchrun's argv names the trainer too)
# whose parent is not one of them: a rank's loader workers run its argv too.
RANKS = (
    "ps -eo pid=,ppid=,args= | awk '/-m rig\\.launch\\.(trainer|binder)/ && !/rig\\.launch\\.torchrun/ "
    "{p[$1] = $2} END {for (k in p) if (!(p[k] in p)) print k}' | sort -n"
)


def _ranks_alive(containers: Containers, c: Any) -> list[str]:
    _, out = containers.exec(c, RANKS, 10)
    return out.split()


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
        "cpuset": "0-1",
        "volumes": [f"{data}:/data:ro"],
        "command": ["bash", "-c", f"{train} && (cut -d, -f1 /tmp/runs/n/results.csv || true)"],
        "environment": {
            "RDZV_ID": "cpu-ranks-test",  # by hand: the run's identity, so the nodes agree on its folder
            "RIG_NCCL_TIMEOUT": "300",  # a rank left waiting in a collective fails in minutes
        },
    }
    nodes = composenodes.nodes(service, 29431, node0={"hostname": "node0"}, node1={"hostname": "node1"})
    ran = composenodes.run(nodes, tmp_path, kind="cpuranks", timeout=900)
    logs = ran.logs
    assert ran.up.returncode == 0, ran.up.stdout + ran.up.stderr
    assert ran.states == [("node0", "0"), ("node1", "0")], logs
    for node in nodes:
        assert "INFO launch: world: 2 ranks = 2 nodes x 1 rank per node (cpu, gloo)" in logs[node], logs[node]
        assert "--rdzv-backend static" in logs[node]
    assert "INFO trainer: process group: gloo, 2 ranks" in logs["node0"], logs["node0"]  # global rank 0
    # node1 has no run directory of its own: every rank skips the final validation, none waits for it.
    assert "WARNING trainer: final validation skipped: /tmp/runs/n/weights/best.pt" in logs["node0"], logs
    assert logs["node0"].split()[-3:] == ["epoch", "1", "2"], logs["node0"]


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
    rank1 = f"{RANKS} | tail -1"
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
    ranks = set(wait_until(lambda: containers.exec(c, RANKS, 10)[1].split(), timeout=300))
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
