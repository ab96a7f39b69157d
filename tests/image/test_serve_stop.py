"""The workstation under `docker compose` when it stops, fails or is flooded: the users' jobs get
SIGTERM and time to save, a FATAL service brings the box back through the restart policy, and a
kernel's output cannot exhaust the supervisor. Real clients: OpenSSH, Jupyter's REST and websocket
APIs, `docker compose` itself."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS
from tests.helpers.waiting import wait_until
from tests.helpers.workstation import KERNEL_CELL, TERMINAL, Workstation, running, start, up

pytestmark = pytest.mark.image

# A job that saves on SIGTERM: 3 s of "cleanup" (a checkpoint being written), then a marker naming
# the signal. SIGHUP or SIGKILL would end it without one.
JOB = (SCRIPTS / "term_marker_job.py").read_text()

# A job with a PyTorch DataLoader worker: it keeps loading batches after SIGTERM, which only works
# if the worker got no SIGTERM of its own (it would die, and the next batch raise RuntimeError).
LOADER_JOB = (SCRIPTS / "loader_job.py").read_text()


@pytest.fixture
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="rig-test-") as d:
        ws = start("rig-test-stop", Path(d))
        with running(ws):
            yield ws


def _in_container(ws: Workstation, script: str, *args: str, timeout: int = 90) -> str:
    result = ws.compose(
        "exec", "-T", "workstation", "timeout", str(timeout), "python", "-", *args, input=script, check=False
    )
    return result.stdout + result.stderr


def _container(ws: Workstation) -> dict[str, object]:
    cid = ws.compose("ps", "-a", "-q", "workstation").stdout.strip()
    out = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, check=True).stdout
    state: dict[str, object] = json.loads(out)[0]
    return state


def _stop(ws: Workstation) -> float:
    started = time.monotonic()
    ws.compose("stop", timeout=180)
    return time.monotonic() - started


def _ssh_shell(ws: Workstation) -> subprocess.Popen[str]:
    """An interactive SSH login with a terminal, as a person at a keyboard has."""
    argv = ws.ssh_argv()
    return subprocess.Popen(
        [*argv[:-1], "-tt", argv[-1]],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


# ---- the users' jobs get SIGTERM and time to save ------------------------------------------------
def test_jobs_in_ssh_sessions_jupyter_terminals_and_kernels_finish_their_cleanup_on_stop(
    ws: Workstation,
) -> None:
    assert ws.ssh(f"mkdir -p /workspace/markers && cat > /workspace/job.py <<'EOF'\n{JOB}EOF").returncode == 0
    job = "python /workspace/job.py"
    # 1. nohup'd from a non-interactive SSH command (orphaned once the command returns);
    nohup = ws.ssh(f"nohup {job} ssh-nohup < /dev/null > /dev/null 2>&1 &")
    assert nohup.returncode == 0, nohup.stderr
    # 2. with a DataLoader worker, nohup'd the same way;
    loader = ws.ssh(
        f"cat > /workspace/loader.py <<'EOF'\n{LOADER_JOB}EOF\n"
        "nohup python /workspace/loader.py < /dev/null > /workspace/loader.log 2>&1 &"
    )
    assert loader.returncode == 0, loader.stderr
    # 3. in the foreground of an interactive SSH login with a terminal;
    shell = _ssh_shell(ws)
    assert shell.stdin is not None
    shell.stdin.write(f"{job} ssh-tty\n")
    shell.stdin.flush()
    # 4. in a Jupyter terminal, typed through its websocket;
    typed = _in_container(ws, TERMINAL, f"{job} jupyter-terminal")
    assert "TYPED" in typed, typed
    # 5. in a notebook kernel: a cell that traps SIGTERM itself, then the kernel sits idle.
    kernel_code = JOB.replace("sys.exit(0)", "os._exit(0)").split("while True:")[0]
    kernel_code = "import os, sys; sys.argv = ['', 'kernel']\n" + kernel_code
    reply = _in_container(ws, KERNEL_CELL, kernel_code, "reply")
    assert "REPLY ok" in reply, reply
    names = ["ssh-nohup", "loader", "ssh-tty", "jupyter-terminal", "kernel"]

    def all_ready() -> bool:
        out = ws.exec("ls /workspace/markers")
        return all(f"{n}.ready" in out.split() for n in names)

    try:
        wait_until(all_ready, timeout=60, interval=0.5)
        took = _stop(ws)
    finally:
        shell.kill()
        shell.wait()
    print(f"stop with five jobs (four saving for 3 s) took {took:.1f} s")
    logs = ws.logs()
    up(ws)
    markers = ws.exec("cd /workspace/markers && for n in " + " ".join(names) + "; do echo $n=$(cat $n); done")
    assert markers.split() == [f"{n}=SIGTERM" for n in names], (
        markers + logs + ws.exec("cat /workspace/loader.log")
    )
    assert "INFO serve: SIGTERM to the sessions' jobs: " in logs, logs
    assert "INFO serve: the sessions' jobs exited after" in logs, logs
    assert 3 <= took < 30, took  # waited for the 3 s cleanup, not for the idle shells
    stop_lines = logs[logs.index("SIGTERM to the sessions' jobs") :].splitlines()
    # Jupyter may log that it restarts the kernel that exited: its own business, not waited for.
    assert not [line for line in stop_lines if line.startswith(("WARNING serve", "ERROR"))], logs


def test_cpu_training_over_ssh_keeps_last_pt_on_stop(ws: Workstation) -> None:
    data = ws.ssh("rig demo-data /datasets/demo --train 64 --val 8 --imgsz 160", timeout=180)
    assert data.returncode == 0, data.stdout + data.stderr
    # Fast epochs (about 1.5 s here): the stop comes in the middle of one. Two loader workers, as a
    # GPU run has them: `rig serve` TERMs the job, never its workers.
    args = (
        "device=cpu data=/datasets/demo/data.yaml model=yolo11n.yaml imgsz=96 batch=4 epochs=500 workers=2"
        " patience=1000 project=/workspace/runs name=stop plots=False"
    )
    started = ws.ssh(f"cd /workspace; nohup rig train {args} < /dev/null > /workspace/train.log 2>&1 &")
    assert started.returncode == 0, started.stderr
    last = "/workspace/runs/stop/weights/last.pt"
    wait_until(lambda: ws.ssh(f"test -f {last}", timeout=15).returncode == 0, timeout=400, interval=2)
    epochs_before = int(ws.exec("tail -n +2 /workspace/runs/stop/results.csv | wc -l"))
    took = _stop(ws)
    print(f"stop during CPU training took {took:.1f} s")
    logs = ws.logs()
    up(ws)
    log = ws.exec("cat /workspace/train.log")
    assert "stop requested (signal 15): saving at this batch boundary" in log, log[-3000:]
    assert f"stopped by signal 15; kept {last}" in log, log[-3000:]
    assert "DataLoader worker" not in log and "Traceback" not in log, log[-3000:]
    epochs = int(ws.exec("tail -n +2 /workspace/runs/stop/results.csv | wc -l"))
    assert epochs_before <= epochs < 500
    saved = ws.exec(f"python -c \"import torch; print(torch.load('{last}', weights_only=False)['epoch'])\"")
    assert int(saved.strip().splitlines()[-1]) == epochs - 1  # the end of the last whole epoch
    assert "INFO serve: the sessions' jobs exited after" in logs, logs
    assert took < 100, took
    # Resumed over SSH after the restart: the interrupted epoch (epochs + 1, 1-based) continues.
    resumed = ws.ssh(
        f"cd /workspace; nohup rig train device=cpu resume=True model={last} > resume.log 2>&1 &"
    )
    assert resumed.returncode == 0, resumed.stderr
    again = f"INFO trainer: resuming {last}: epoch {epochs + 1}/500 "
    wait_until(lambda: again in ws.exec("cat /workspace/resume.log"), timeout=240, interval=2)
    ws.ssh("pkill -TERM -f rig.launch.trainer")


# ---- a FATAL service restarts the box ---------------------------------------------------------------
def test_sshd_killed_until_fatal_comes_back_through_the_restart_policy(ws: Workstation) -> None:
    started_at = _container(ws)["State"]["StartedAt"]  # type: ignore[index]
    pid = None
    for _ in range(5):

        def new_sshd(old: object = pid) -> object:
            sshd = ws.services()["sshd"]
            return sshd["pid"] if sshd["state"] == "running" and sshd["pid"] != old else None

        pid = wait_until(new_sshd, timeout=60, interval=0.2)
        ws.exec(f"kill -KILL {pid}")
    killed_at = time.monotonic()
    wait_until(lambda: ws.ssh("true", timeout=10).returncode == 0, timeout=60, interval=0.5)
    back_after = time.monotonic() - killed_at
    print(f"SSH answered again {back_after:.1f} s after the fifth SIGKILL")
    state = _container(ws)
    assert state["RestartCount"] == 1
    assert state["State"]["StartedAt"] != started_at  # type: ignore[index]
    logs = ws.logs()
    errors = [line for line in logs.splitlines() if line.startswith("ERROR")]
    assert errors == [
        "ERROR sshd: exited (killed by signal 9), 5 failures in a row (FATAL): stopping the workstation "
        "with exit code 1, so that the container's restart policy starts it afresh"
    ], logs
    assert back_after < 60


# ---- a flood of output from a kernel ----------------------------------------------------------------
FLOOD = (SCRIPTS / "output_flood.py").read_text()


# The kernel's own copy of the fd 1 it inherited from JupyterLab (ipykernel keeps it, and sends what
# is written to fd 1 itself to the notebook): the pipe to the supervisor.
FLOOD_DIRECT = (SCRIPTS / "output_flood_fd.py").read_text()


def test_a_kernel_writing_gigabytes_without_a_newline_leaves_the_supervisor_small(ws: Workstation) -> None:
    state = _container(ws)
    jupyter_pid = ws.services()["jupyter"]["pid"]
    supervisor = int(ws.exec(f"cut -d' ' -f4 /proc/{jupyter_pid}/stat"))

    def hwm_mib() -> float:
        status = ws.exec(f"cat /proc/{supervisor}/status")
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        return kib / 1024

    before = hwm_mib()
    out = _in_container(ws, KERNEL_CELL, FLOOD, "start")
    assert "STARTED" in out, out
    started = time.monotonic()
    wait_until(
        lambda: ws.exec("test -f /workspace/flood.done && echo y").strip() == "y", timeout=300, interval=1
    )
    took = time.monotonic() - started
    after = hwm_mib()
    print(
        f"1.5 GiB without a newline through the kernel: {took:.1f} s (kernel: "
        f"{ws.exec('cat /workspace/flood.done')} s); supervisor VmHWM {before:.0f} -> {after:.0f} MiB"
    )
    assert after < 150
    # The same past ipykernel's relay (it forwards fd 1 in 1000-byte reads): the supervisor's pace.
    reply = _in_container(ws, KERNEL_CELL, FLOOD_DIRECT, "reply", timeout=200)
    assert "REPLY ok" in reply, reply
    direct = float(ws.exec("cat /workspace/flood-direct.done"))
    print(
        f"1.5 GiB right into JupyterLab's stdout pipe: drained in {direct:.1f} s; VmHWM {hwm_mib():.0f} MiB"
    )
    assert hwm_mib() < 150
    assert direct < 30
    assert ws.exec(f"cat /proc/{supervisor}/cmdline | tr '\\0' ' '").startswith("/opt/venv/bin/python")
    now = _container(ws)
    assert now["RestartCount"] == 0
    assert now["State"]["StartedAt"] == state["State"]["StartedAt"]  # type: ignore[index]
    assert ws.ssh("true").returncode == 0
    logs = ws.logs()
    # One cut line, or a few where Jupyter's own log lines ended the flood's line in between.
    cuts = logs.count("[...] (line cut at 8192 bytes, the rest dropped)")
    assert 2 <= cuts <= 50, cuts
    assert len(logs) < 2_000_000, len(logs)
