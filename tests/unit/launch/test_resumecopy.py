"""What was checked is what is loaded: a resumed checkpoint opened once through checked folders,
its bytes copied for the ranks from that descriptor, the copy private and removed when the launch
ends; resume=auto's reading bounded in memory whatever the pickle builds.

The tests run as root; a second user's files are made by chown (A 2001, B 2002)."""

from __future__ import annotations

import io
import os
import shlex
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rig import cli, safefs
from rig.errors import RigError
from rig.launch import autoresume, rankside, resumecopy, trainplan

from tests.helpers import needs_root
from tests.helpers.fakesys import FakeSys

A, B, TEAM = 2001, 2002, 0  # TEAM: a group every test box has (root's)
ENTRYPOINT = Path(__file__).resolve().parents[3] / "entrypoint"


def _bomb(lists: int) -> bytes:
    """A torch-style archive whose data.pkl is one list of `lists` empty lists: a few hundred kB
    deflated, gigabytes once unpickled."""
    out = io.BytesIO()
    deflated = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(out, "w", compression=deflated) as z, z.open("archive/data.pkl", "w") as f:
        f.write(b"\x80\x02](")  # PROTO 2, EMPTY_LIST, MARK
        chunk = b"]" * (1 << 20)
        for _ in range(lists >> 20):
            f.write(chunk)
        f.write(b"e.")  # APPENDS, STOP
    return out.getvalue()


def test_a_pickle_bomb_is_one_line_within_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "weights").mkdir()
    bomb = _bomb(16 << 20)  # 16 M lists: about 1 GiB of Python objects
    assert len(bomb) < 200_000
    (tmp_path / "weights/last.pt").write_bytes(bomb)
    fd = os.open(tmp_path / "weights/last.pt", os.O_RDONLY)
    try:
        started = time.monotonic()
        with pytest.raises(MemoryError, match="needs more than 128 MiB of memory"):
            autoresume.read_bounded(fd, limit=128 << 20)
        assert time.monotonic() - started < 30
    finally:
        os.close(fd)
    # The planning's own line, through read_state's default reader (its bound made smaller: the
    # image's test reads the 100 M lists at the real one, in a container of 4 GiB).
    monkeypatch.setattr(autoresume, "MAX_READ_BYTES", 128 << 20)
    with pytest.raises(RigError, match=r"last.pt cannot be read \(reading it needs more than 128 MiB"):
        autoresume.read_state(tmp_path)


def test_the_bounded_reader_reads_what_planning_needs(tmp_path: Path) -> None:
    ckpt = {
        "epoch": 1,
        "train_args": {"epochs": 3},
        "optimizer": {"state": {}},
        "rig_resume": {"format": 1, "epoch": 2, "done": 4, "batches": 10},
    }
    import pickle

    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(ckpt, protocol=2))
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights/last.pt").write_bytes(data.getvalue())
    state = autoresume.read_state(tmp_path)
    assert (state.epoch, state.epochs, state.stripped) == (1, 3, False)
    assert state.position is not None and (state.position.epoch, state.position.done) == (2, 4)
    assert state.checked is not None and os.pread(state.checked.fd, 4, 0) == data.getvalue()[:4]
    state.checked.close()
    (tmp_path / "weights/last.pt").write_bytes(b"not a zip")
    with pytest.raises(RigError, match=r"cannot be read \(BadZipFile: File is not a zip file\)"):
        autoresume.read_state(tmp_path)


@needs_root
def test_the_copy_is_what_was_opened_private_and_named_like_it(tmp_path: Path) -> None:
    team = tmp_path / "team"
    run = team / "alice/run/weights"
    run.mkdir(parents=True)
    os.chown(team, 0, TEAM)
    os.chmod(team, 0o2775)  # root:team, group-writable, not sticky: the team may rename in it
    for p in (team / "alice", team / "alice/run", run):
        os.chown(p, A, A)
    (run / "last.pt").write_bytes(b"A's checkpoint" * 1000)
    os.chown(run / "last.pt", A, A)
    with pytest.raises(RigError, match=r"/team can be written by gid 0 .*RIG_SHARE_GROUP"):
        resumecopy.open_checked(run / "last.pt", safefs.Trust(A))
    checked = resumecopy.open_checked(run / "last.pt", safefs.Trust(A, TEAM))
    # B swaps the tree while the ranks start: the copy is made from what was opened.
    os.rename(team / "alice", team / "alice-old")
    (team / "alice/run/weights").mkdir(parents=True)
    (team / "alice/run/weights/last.pt").write_bytes(b"B's pickle")
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o1777)
    os.chmod(tmp, 0o1777)
    made = resumecopy.copy(checked, tmp, safefs.Trust(A, TEAM))
    checked.close()
    assert made.file == made.folder / "last.pt" and made.folder.parent == tmp
    assert made.file.read_bytes() == b"A's checkpoint" * 1000
    st = os.stat(made.folder)
    assert stat.S_IMODE(st.st_mode) == 0o700 and stat.S_IMODE(os.stat(made.file).st_mode) == 0o600
    # A temporary folder others can write (B's, not sticky) is never where the copy goes.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, B, B)
    checked = resumecopy.open_checked(team / "alice-old/run/weights/last.pt", safefs.Trust(A, TEAM))
    with pytest.raises(RigError, match=r"private copy .* in .*theirs .*belongs to uid 2002.*set TMPDIR"):
        resumecopy.copy(checked, theirs, safefs.Trust(A, TEAM))
    checked.close()
    assert list(theirs.iterdir()) == []


def test_the_copy_goes_when_the_launch_it_was_made_for_ends(tmp_path: Path) -> None:
    folder = tmp_path / "rig-resume-x"
    folder.mkdir(mode=0o700)
    (folder / "last.pt").write_bytes(b"x")
    # A launcher that arranges the removal, then execs what stands for torchrun (0.5 s of work).
    launcher = (
        "import sys; from pathlib import Path; from rig.launch import resumecopy; "
        "resumecopy.remove_after(Path(sys.argv[1])); "
        "import os; os.execv('/bin/sh', ['sh', '-c', 'sleep 0.5; ls \"$0\"', sys.argv[1]])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", launcher, str(folder)],
        env={**os.environ, "PYTHONPATH": str(ENTRYPOINT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["last.pt"], proc  # there while it ran
    deadline = time.monotonic() + 10
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not folder.exists()


@pytest.mark.parametrize("form", ["resume=True model={last}", "resume={last}"])
def test_the_ranks_get_the_copy_and_the_dry_run_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, plain_env: None, form: str
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    last = tmp_path / "runs/detect/train/weights/last.pt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"checkpoint")
    FakeSys(tmp_path / "sys").node(0, "0-3").online("0-3")
    kv = ["device=cpu", *form.format(last=last).split()]
    assert cli.main(["train", "--sysfs-root", str(tmp_path / "sys"), "--dry-run", *kv]) == 0
    printed = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    assert f"model={last}" in printed or f"resume={last}" in printed, printed  # the plan, by its path
    assert list((tmp_path / "tmp").iterdir()) == []  # nothing copied by a dry run
    launch = trainplan.plan_train(kv, read_topology=lambda: _topology(tmp_path))
    args = dict(a.split("=", 1) for a in launch.command[launch.command.index("rig.launch.trainer") + 1 :])
    copied = Path(args["model"])
    assert launch.private == str(copied.parent) and copied.parent.parent == tmp_path / "tmp"
    assert copied.name == "last.pt" and copied.read_bytes() == b"checkpoint"
    assert args.get("resume") in {"True", str(copied)}, args
    assert "project" not in args and "name" not in args  # the run's folder: the checkpoint's own
    # The ranks' lines name the checkpoint as the user did, never the copy.
    rank = rankside.LaunchRank(launch.env)
    assert rank.named(str(copied)) == str(last) and rank.named("yolo11n.pt") == "yolo11n.pt"


def _topology(tmp_path: Path) -> Any:
    from rig.launch import job

    return job.topology(str(tmp_path / "sys"))


@pytest.mark.parametrize(
    ("argv", "resumed"),
    [
        (["train", "resume", "model=runs/last.pt"], ("runs/last.pt", 2)),
        (["train", "resume=True", "model=runs/last.pt"], ("runs/last.pt", 2)),
        (["detect", "train", "model=a/last.pt", "--resume"], ("a/last.pt", 2)),
        (["train", "resume=a/last.pt", "model=yolo11n.pt"], ("a/last.pt", 1)),
        (["mode=train", "resume", "=", "a/last.pt"], ("a/last.pt", 1)),  # merged as Ultralytics does
        (["train", "resume=", "a/last.pt"], ("a/last.pt", 1)),
        (["train", "resume=False", "model=a/last.pt"], None),
        (["train", "model=a/last.pt"], None),  # a fresh run from weights
        (["train", "resume"], None),  # no checkpoint named: stock starts anew from its default
        (["val", "resume", "model=a/last.pt"], None),
        (["train", "resume", "model=yolo11n.yaml"], None),
    ],
)
def test_what_stock_yolo_would_resume(argv: list[str], resumed: tuple[str, int] | None) -> None:
    assert resumecopy.yolo_resumed(argv) == resumed


@needs_root
def test_rig_yolo_gives_stock_yolo_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/weights").mkdir(parents=True)
    (tmp_path / "runs/weights/last.pt").write_bytes(b"ckpt")
    argv, made = resumecopy.for_yolo(["train", "resume", "model=runs/weights/last.pt"], tmp_path / "w")
    assert made is not None and argv == ["train", "resume", f"model={made.file}"]
    assert made.file.read_bytes() == b"ckpt" and made.folder.parent == tmp_path / "tmp"
    argv, made = resumecopy.for_yolo(["train", "resume", "=", "runs/weights/last.pt"], tmp_path / "w")
    assert made is not None and argv == ["train", f"resume={made.file}"]
    assert resumecopy.for_yolo(["train", "model=x.pt"], tmp_path / "w") == (["train", "model=x.pt"], None)
    os.chmod(tmp_path / "runs", 0o777)  # a folder above it anyone can write
    with pytest.raises(RigError, match=r"/runs can be written by anyone"):
        resumecopy.for_yolo(["train", "resume", "model=runs/weights/last.pt"], tmp_path / "w")
