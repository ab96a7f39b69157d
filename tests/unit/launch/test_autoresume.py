"""resume=auto: what a run directory's last.pt says, the decision, the stable name under schedulers."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from rig import cli
from rig.errors import RigError
from rig.launch import autoresume, nodes, rundir, trainplan
from rig.yolo import resumable

from tests.helpers.fakesys import FakeSys


def _ckpt(
    epoch: int, epochs: int = 3, done: int | None = None, stripped: bool = False, batches: int = 10
) -> dict[str, Any]:
    """A checkpoint as Ultralytics (done None) or rig writes it (to continue at batch `done` of the
    epoch after `epoch`, Ultralytics' last whole one)."""
    ckpt: dict[str, Any] = {
        "epoch": epoch,
        "train_args": {"epochs": epochs},
        "train_metrics": {"metrics/mAP50(B)": 0.1},
        "optimizer": None if stripped else {"state": {}},
    }
    if done is not None:
        ckpt[resumable.RESUME_KEY] = {"format": 1, "epoch": epoch + 1, "done": done, "batches": batches}
    return ckpt


@pytest.mark.parametrize(
    ("ckpt", "kind"),
    [
        (None, "fresh"),
        (_ckpt(0), "resume"),  # epoch 1 of 3 saved
        (_ckpt(1), "resume"),
        (_ckpt(-1, done=4), "resume"),  # stopped in the first epoch (as rig wrote it before)
        (_ckpt(1, done=4), "resume"),
        (_ckpt(1, done=10), "resume"),  # stopped during the validation of epoch 3
        (_ckpt(1, done=0), "resume"),  # rig's end of epoch 2
        (_ckpt(-1, stripped=True), "finished"),  # Ultralytics' end: optimizer stripped, epoch -1
        (_ckpt(2), "finished"),  # every epoch saved, the final validation cut short
        (_ckpt(2, done=0), "finished"),  # the same, saved by rig
    ],
)
def test_the_decision_follows_last_pt(tmp_path: Path, ckpt: dict[str, Any] | None, kind: str) -> None:
    if ckpt is not None:
        (tmp_path / "weights").mkdir()
        (tmp_path / "weights/last.pt").write_bytes(b"x")
    state = autoresume.read_state(tmp_path, load=lambda _p: ckpt or {})
    assert autoresume.decide(tmp_path, state).kind == kind


@pytest.mark.parametrize(
    ("epoch", "done", "kind"),
    [(0, 4, "resume"), (0, 10, "resume"), (1, 0, "finished")],
    ids=["inside-the-epoch", "trained-its-validation-next", "its-end"],
)
def test_a_one_epoch_run_stopped_in_its_epoch_is_not_finished(
    tmp_path: Path, epoch: int, done: int, kind: str
) -> None:
    """rig's first-epoch checkpoint tells stock Ultralytics epoch 0 (as its end of epoch 1 does):
    resume=auto reads rig's position, not that key."""
    ckpt = _ckpt(resumable.stock_epoch(epoch), epochs=1)
    ckpt[resumable.RESUME_KEY] = {"format": 1, "epoch": epoch, "done": done, "batches": 10}
    assert ckpt["epoch"] == 0
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights/last.pt").write_bytes(b"x")
    state = autoresume.read_state(tmp_path, load=lambda _p: ckpt)
    assert autoresume.decide(tmp_path, state).kind == kind


def test_resume_auto_says_where_it_continues(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights/last.pt").write_bytes(b"x")
    for ckpt, where in [
        (_ckpt(1, done=4), "epoch 3/3 at batch 5/10"),
        (_ckpt(1, done=10), "epoch 3/3 trained, its validation next"),
        (_ckpt(0, done=0), "epoch 2/3 from its start"),
        (_ckpt(0), "after epoch 1/3"),  # Ultralytics' own checkpoint
    ]:
        state = autoresume.read_state(tmp_path, load=lambda _p, c=ckpt: c)  # type: ignore[misc]
        assert autoresume.decide(tmp_path, state).message.endswith(where), where


def test_an_unreadable_last_pt_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights/last.pt").write_bytes(b"truncated")

    def load(_p: Path) -> Any:
        raise EOFError("Ran out of input")

    with pytest.raises(RigError, match=r"cannot be read .*EOFError.*move it away"):
        autoresume.read_state(tmp_path, load=load)


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({}, "train"),
        ({"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "1"}, "train-slurm-4242"),
        # The training operator: MASTER_ADDR/PET_MASTER_ADDR is the master pod, `<job>-master-0`.
        (
            {"PET_NNODES": "2", "PET_MASTER_ADDR": "yolo-a-master-0", "MASTER_ADDR": "yolo-a-master-0"},
            "train-yolo-a",
        ),
        ({"MASTER_ADDR": "node0", "NNODES": "2"}, "train"),  # by hand: no job to name
    ],
)
def test_the_default_run_name_is_stable_under_a_scheduler(environ: dict[str, str], name: str) -> None:
    assert rundir.default_name(nodes.job_name(environ)) == name
    assert (nodes.job_name(environ) is None) == (name == "train")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_"))]:
        monkeypatch.delenv(k)
    for k in (
        "NNODES",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        trainplan.CPU_RANKS_ENV,
    ):
        monkeypatch.delenv(k, raising=False)


def _run(tmp_path: Path, capsys: Any, *extra: str) -> tuple[int, str, dict[str, str]]:
    root = tmp_path / "sys"
    FakeSys(root).node(0, "0-3").online("0-3")
    argv = ["train", "--sysfs-root", str(root), "--dry-run", "device=cpu", "--cpu-ranks", "2"]
    code = cli.main([*argv, "data=x.yaml", "model=m.yaml", f"project={tmp_path}/runs", "resume=auto", *extra])
    out, err = capsys.readouterr()
    args: dict[str, str] = {}
    if out.strip():
        printed = shlex.split(out.strip().splitlines()[-1])
        program = printed[printed.index("rig.launch.trainer") + 1 :]
        args = dict(a.split("=", 1) for a in program)
    return code, err, args


def test_resume_auto_under_slurm_starts_continues_and_finishes(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    run = tmp_path / "runs/train-slurm-77"
    code, err, args = _run(tmp_path, capsys)
    assert code == 0 and f"no last.pt in {run}: starting the run there" in err
    assert args["name"] == "train-slurm-77" and args["exist_ok"] == "True" and "resume" not in args
    assert args["batch"] == "32"  # a fresh run: the default batch over the 2 ranks

    assert rundir.claim(tmp_path / "runs", "train-slurm-77", "slurm-77") == run  # what the run claims
    (run / "weights").mkdir(parents=True, exist_ok=True)  # rig makes it with the run folder
    (run / "weights/last.pt").write_bytes(b"x")
    # (read in a child process: what it reads is set before each planning)
    monkeypatch.setattr(autoresume, "_load", lambda _p: _ckpt(1, done=4))
    code, err, args = _run(tmp_path, capsys)
    assert code == 0 and "continuing" in err and "at epoch 3/3 at batch 5/10" in err
    assert args["resume"] == "True" and args["model"] == str(run / "weights/last.pt") and "batch" not in args

    monkeypatch.setattr(autoresume, "_load", lambda _p: _ckpt(-1, stripped=True))
    code, err, args = _run(tmp_path, capsys)
    assert code == 0 and args == {}
    finished = f"INFO train: resume=auto: {run} is finished ({run}/weights/last.pt); nothing to train"
    assert err.strip().splitlines()[-1] == finished


def test_resume_auto_with_a_name_continues_the_jobs_own_folder(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    # name=exp under Slurm: job 77's folder is exp (claimed with its owner file); job 78 with the
    # same name gets exp-2; job 77 requeued continues exp, whatever job 78 left in exp-2.
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    runs = tmp_path / "runs"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    code, err, args = _run(tmp_path, capsys, "name=exp")
    assert code == 0 and f"no last.pt in {runs}/exp: starting the run there" in err
    assert rundir.claim(runs, "exp", "slurm-77") == runs / "exp"  # what job 77's reservation made
    (runs / "exp/weights").mkdir(exist_ok=True)
    (runs / "exp/weights/last.pt").write_bytes(b"x")
    monkeypatch.setattr(autoresume, "_load", lambda _p: _ckpt(1, done=4))
    # Job 77 waits in the queue, requeued (squeue's answer): its folder is still its own.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/squeue").write_text("#!/bin/sh\necho PENDING\n")
    (tmp_path / "bin/squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}/bin:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    code, err, args = _run(tmp_path, capsys, "name=exp")
    assert code == 0 and f"no last.pt in {runs}/exp-2: starting the run there" in err, err
    assert args["name"] == "exp-2" and "resume" not in args
    assert rundir.claim(runs, "exp", "slurm-78") == runs / "exp-2"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    code, err, args = _run(tmp_path, capsys, "name=exp")
    assert code == 0 and f"continuing {runs}/exp/weights/last.pt" in err, err
    assert args["resume"] == "True" and args["model"] == str(runs / "exp/weights/last.pt")
