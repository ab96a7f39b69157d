"""deploy/slurm.sbatch's stop logic, the script itself under bash with stand-ins for srun, scancel and
scontrol (the local Slurm cluster runs it for real: tests/cluster/test_slurm_stop.py): the time-limit
warning (USR1) stops the ranks and requeues the job only when they stopped on the signal, never
after a crash (a job that fails would be requeued for ever); the ranks get the script's grace."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.waiting import wait_until

SRUN = """#!/bin/sh
case "$*" in *mkdir*) exit 0 ;; esac
echo "$RIG_STOP_GRACE" > "$STUB_DIR/grace"
while [ ! -e "$STUB_DIR/term" ]; do sleep 0.05; done
exit "$STUB_RC"
"""
SCANCEL = '#!/bin/sh\necho "$@" >> "$STUB_DIR/scancel"\ntouch "$STUB_DIR/term"\n'
SCONTROL = '#!/bin/sh\necho "$@" >> "$STUB_DIR/scontrol"\n'


def _run(tmp_path: Path, rc: int, warn: bool) -> tuple[int, str, Path]:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in (("srun", SRUN), ("scancel", SCANCEL), ("scontrol", SCONTROL)):
        (stubs / name).write_text(body)
        (stubs / name).chmod(0o755)
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "STUB_DIR": str(tmp_path),
        "STUB_RC": str(rc),
        "SLURM_JOB_ID": "77",
        "USER": "someone",
        "HOME": str(tmp_path),
    }
    script = subprocess.Popen(
        ["bash", str(REPO / "deploy/slurm.sbatch")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: (tmp_path / "grace").exists(), timeout=30, interval=0.05)
        time.sleep(0.2)  # the script waits for srun
        if warn:
            script.send_signal(signal.SIGUSR1)  # Slurm's --signal=B:USR1@..., the time limit near
        else:
            (tmp_path / "term").touch()  # `scancel --signal=TERM JOBID` by hand
        out, _ = script.communicate(timeout=30)
    finally:
        script.kill()
    return script.returncode, out, tmp_path


@pytest.mark.parametrize("rc", [143, 130, 129])
def test_the_time_limit_requeues_a_job_whose_ranks_stopped_on_the_signal(tmp_path: Path, rc: int) -> None:
    code, out, stub = _run(tmp_path, rc, warn=True)
    assert code == 0, out
    assert (stub / "scancel").read_text().split() == ["--signal=TERM", "77"]
    assert (stub / "scontrol").read_text().split() == ["requeue", "77"], out
    assert (stub / "grace").read_text().strip() == "90"  # the ranks' grace, inside the budget


@pytest.mark.parametrize("rc", [1, 137, 0])
def test_the_time_limit_never_requeues_a_crash(tmp_path: Path, rc: int) -> None:
    code, out, stub = _run(tmp_path, rc, warn=True)
    assert code == rc, out
    assert not (stub / "scontrol").exists(), out
    if rc:
        assert f"ERROR slurm.sbatch: the ranks did not stop cleanly (exit {rc})" in out, out


def test_a_stop_by_hand_is_not_requeued(tmp_path: Path) -> None:
    code, out, stub = _run(tmp_path, 143, warn=False)
    assert code == 143 and not (stub / "scontrol").exists(), out
