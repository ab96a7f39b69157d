"""Long runs over SSH, with the real OpenSSH client: a run in tmux outlives its connection; a run
started straight in an SSH terminal stops cleanly (last.pt kept) when the connection drops, and said
so when it started; no such line inside tmux or without a terminal."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.waiting import wait_until
from tests.helpers.workstation import TERMINAL, Workstation, running, start

pytestmark = pytest.mark.image

HINT = "INFO train: a dropped connection stops this run (it keeps last.pt)"
# Tiny and slow enough: epochs of a second or two on this CPU, so a run is still going when looked at.
TRAIN = (
    "rig train device=cpu data=/datasets/demo/data.yaml model=yolo11n.yaml imgsz=96 batch=4 workers=2 "
    "plots=False project=/workspace/runs"
)


@pytest.fixture(scope="module")
def ws(image: str) -> Iterator[Workstation]:
    with tempfile.TemporaryDirectory(prefix="rig-long-") as d:
        ws = start("rig-long", Path(d))
        with running(ws):
            made = ws.ssh("rig demo-data /datasets/demo --train 48 --val 8 --imgsz 128", timeout=180)
            assert made.returncode == 0, made.stdout + made.stderr
            yield ws


def _size(ws: Workstation, path: str) -> int:
    out = ws.ssh(f"stat -c %s {path} 2>/dev/null || echo 0", timeout=15).stdout.strip()
    return int(out or 0)


def test_a_run_in_tmux_outlives_its_connection(ws: Workstation) -> None:
    log = "/workspace/tmux.log"
    started = ws.ssh(f"tmux new -d -s t '{TRAIN} epochs=4 name=tmux 2>&1 | tee {log}'")
    assert started.returncode == 0, started.stderr  # that connection is closed now
    wait_until(lambda: _size(ws, log) > 0, timeout=120, interval=1)
    first = _size(ws, log)
    # A new connection: the session is alive and the run's log is growing.
    assert ws.ssh("tmux has-session -t t").returncode == 0
    wait_until(lambda: _size(ws, log) > first, timeout=120, interval=1)
    done = "grep -q 'epochs completed' /workspace/tmux.log"
    wait_until(lambda: ws.ssh(done, timeout=15).returncode == 0, timeout=400, interval=2)
    text = ws.ssh(f"cat {log}").stdout
    assert "4 epochs completed" in text and HINT not in text, text[-2000:]
    rows = ws.ssh("tail -n +2 /workspace/runs/tmux/results.csv | wc -l").stdout.strip()
    assert rows == "4"


def test_a_run_in_an_ssh_terminal_says_so_and_stops_cleanly_when_the_connection_drops(
    ws: Workstation,
) -> None:
    log = "/workspace/ssh.log"
    client = subprocess.Popen(
        [*ws.ssh_argv(), "-tt", f"{TRAIN} epochs=50 name=ssh > {log} 2>&1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: ws.ssh(f"grep -q 'Starting training for' {log}", timeout=15).returncode == 0, timeout=240
        )
    finally:
        client.kill()  # the laptop lid closes: the connection is gone without a goodbye
        client.wait()
    stopped = f"grep -q 'stopped by signal 1' {log}"
    wait_until(lambda: ws.ssh(stopped, timeout=15).returncode == 0, timeout=120, interval=1)
    text = ws.ssh(f"cat {log}").stdout
    assert HINT in text.splitlines()[0] or any(line.startswith(HINT) for line in text.splitlines()), text[
        :3000
    ]
    assert "stop requested (signal 1): saving at this batch boundary" in text, text[-3000:]
    assert "Traceback" not in text and "DataLoader worker" not in text, text[-3000:]
    assert ws.ssh("test -f /workspace/runs/ssh/weights/last.pt").returncode == 0


def test_no_line_without_a_terminal(ws: Workstation) -> None:
    result = ws.ssh(f"{TRAIN} epochs=1 name=quiet 2>&1", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 epochs completed" in result.stdout and HINT not in result.stdout


def test_tmux_in_a_jupyter_terminal_has_the_login_environment(ws: Workstation) -> None:
    typed = "tmux new -d -s j 'printenv PATH VIRTUAL_ENV NVIDIA_VISIBLE_DEVICES > /workspace/j.env'"
    out = ws.compose(
        "exec", "-T", "workstation", "timeout", "60", "python", "-", typed, input=TERMINAL
    ).stdout
    assert "TYPED" in out, out
    wait_until(lambda: _size(ws, "/workspace/j.env") > 0, timeout=30, interval=0.5)
    lines = ws.ssh("cat /workspace/j.env").stdout.splitlines()
    # The venv ahead of the system's folders; Debian's ~/.profile may put the user's own ~/.local/bin
    # (what `pip install` adds) first, as on any Debian login.
    path = [p for p in lines[0].split(":") if p != "/home/yolo/.local/bin"]
    assert path[0] == "/opt/venv/bin" and lines[1:] == ["/opt/venv", "all"], lines
