"""deploy/slurm.sbatch's stop logic, the script itself under bash with stand-ins for srun, scancel and
scontrol (the local Slurm cluster runs it for real: tests/cluster/test_slurm_stop.py): the time-limit
warning (USR1) stops the ranks and requeues the job only when they stopped on the signal, never
after a crash (a job that fails would be requeued for ever); the ranks get the script's grace."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

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
SRUN_RECORDS = '#!/bin/sh\ncase "$*" in *mkdir*) exit 0 ;; esac\necho "$@" > "$STUB_DIR/srun"\n'


def _stub_env(tmp_path: Path, stubs: dict[str, str], **env: str) -> dict[str, str]:
    """The environment the sbatch runs in here: Slurm's commands as the stubs given, first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in stubs.items():
        (folder / name).write_text(body)
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}:{os.environ['PATH']}", "STUB_DIR": str(tmp_path), "HOME": str(tmp_path), **env}


def _run(tmp_path: Path, rc: int, warn: bool, scancel: str = SCANCEL) -> tuple[int, str, Path]:
    env = _stub_env(
        tmp_path,
        {"srun": SRUN, "scancel": scancel, "scontrol": SCONTROL},
        STUB_RC=str(rc),
        SLURM_JOB_ID="77",
        USER="someone",
    )
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


def test_ranks_that_stop_while_the_warning_is_handled_are_requeued(tmp_path: Path) -> None:
    """srun ends while the script is still in its USR1 trap (scancel returns late): the status taken
    is srun's own (143), not the interrupted `wait`'s (138), so the job is requeued."""
    slow_scancel = SCANCEL + "sleep 0.5\n"
    code, out, stub = _run(tmp_path, 143, warn=True, scancel=slow_scancel)
    assert code == 0 and (stub / "scontrol").read_text().split() == ["requeue", "77"], out


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


# srun that runs the per-node folder check (its first argument is --ntasks-per-node=1), nothing else.
OWN_SRUN = '#!/bin/sh\ncase "$*" in *mkdir*) shift; exec "$@" ;; esac\nexit 0\n'


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: (p.mkdir(), os.chown(p, 2002, 2002)), "belongs to uid 2002, not to you (uid 0)"),
        (lambda p: (p.mkdir(), os.chmod(p, 0o777)), "can be written by others (mode 777)"),
        (lambda p: p.symlink_to("/tmp"), "is not a folder (a link or a file)"),
        (None, None),  # missing: made, private
    ],
)
def test_a_cache_folder_someone_else_controls_is_one_line(
    tmp_path: Path, make: Any, says: str | None
) -> None:
    out, cache = _own_folders(tmp_path, make, "CACHE")
    if says is None:
        assert out.returncode == 0 and stat.S_IMODE(cache.stat().st_mode) == 0o700, out.stderr
        return
    errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR")]
    assert out.returncode == 1 and len(errors) == 1 and says in errors[0], out.stderr


def test_a_runs_folder_of_another_user_is_one_line_a_sticky_one_of_roots_is_shared(tmp_path: Path) -> None:
    out, _ = _own_folders(tmp_path, lambda p: (p.mkdir(), os.chown(p, 2002, 2002)), "RUNS")
    assert out.returncode == 1 and "belongs to uid 2002" in out.stderr, out.stderr
    out, _ = _own_folders(tmp_path, lambda p: (p.mkdir(), os.chown(p, 0, 0), os.chmod(p, 0o1777)), "RUNS")
    assert out.returncode == 0, out.stderr


def _own_folders(tmp_path: Path, make: Any, variable: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The sbatch run with `variable` (CACHE or RUNS) at a folder `make` prepares (None: nothing there)."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    folder = tmp_path / "scratch" / "folder"
    folder.parent.mkdir()
    if make is not None:
        make(folder)
    env = _stub_env(tmp_path, {"srun": OWN_SRUN}, SLURM_JOB_ID="77", CACHE=str(tmp_path / "cache"))
    env[variable] = str(folder)
    out = subprocess.run(
        ["bash", str(REPO / "deploy/slurm.sbatch")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out, folder


def test_the_default_project_is_the_job_users_own_folder_on_the_shared_runs(tmp_path: Path) -> None:
    """rig never writes into a project folder another user made first: on a runs folder users share,
    the sbatch's default project is the job's user's own (SLURM_JOB_USER, as under --export=NONE)."""
    env = _stub_env(tmp_path, {"srun": SRUN_RECORDS}, SLURM_JOB_ID="78", SLURM_JOB_USER="bob")
    run = subprocess.run(
        ["bash", str(REPO / "deploy/slurm.sbatch")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    args = (tmp_path / "srun").read_text().split()
    assert "project=/workspace/runs/bob" in args, args
    assert "/tmp/yolo-rig-cache-bob:/cache" in " ".join(args), args  # no SLURM_TMPDIR, no TMPDIR


SRUN_ENV = '#!/bin/sh\ncase "$*" in *mkdir*) exit 0 ;; esac\necho "$MASTER_PORT $*" > "$STUB_DIR/srun"\n'


@pytest.mark.parametrize(
    ("env", "cache", "port"),
    [
        ({}, "/tmp/yolo-rig-cache-bob", "61078"),  # 61000 + 78 % 4536: above the ephemeral range
        ({"TMPDIR": "/scratch/tmp"}, "/scratch/tmp/yolo-rig-cache-bob", "61078"),
        ({"TMPDIR": "/t", "SLURM_TMPDIR": "/job/78"}, "/job/78/yolo-rig-cache-bob", "61078"),
        ({"CACHE": "/local/mine", "MASTER_PORT": "29999"}, "/local/mine", "29999"),  # the user's win
    ],
)
def test_the_cache_and_the_port_the_steps_get(
    tmp_path: Path, env: dict[str, str], cache: str, port: str
) -> None:
    """The cache in the job's temporary folder (SLURM_TMPDIR, TMPDIR, else /tmp), and MASTER_PORT
    exported for the steps (--container-env keeps it over enroot's hook: 3.x's is ephemeral)."""
    stub_env = _stub_env(tmp_path, {"srun": SRUN_ENV}, SLURM_JOB_ID="78", SLURM_JOB_USER="bob", **env)
    run = subprocess.run(
        ["bash", str(REPO / "deploy/slurm.sbatch")],
        cwd=tmp_path, env=stub_env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    got_port, *args = (tmp_path / "srun").read_text().split()
    assert got_port == port and f"{cache}:/cache" in " ".join(args), (got_port, args)
    assert "--container-env=MASTER_ADDR,MASTER_PORT" in args, args


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    readonly = tmp_path / "ro"
    readonly.write_text("a file where a folder should be")
    env = _stub_env(Path(tempfile.mkdtemp(dir=tmp_path)), {"srun": OWN_SRUN}, SLURM_JOB_ID="77")
    env["TMPDIR"] = str(readonly / "tmp")  # under a file: mkdir fails
    out = subprocess.run(
        ["bash", str(REPO / "deploy/slurm.sbatch")], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 1 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"ERROR slurm.sbatch: cannot make {readonly}/tmp/yolo-rig-cache-") and (
        "(Not a directory): set CACHE to a node-local folder of yours" in errors[0]
    ), errors
