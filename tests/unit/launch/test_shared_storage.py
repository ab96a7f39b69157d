"""Run folders on storage other users share: trusted by ownership, never by content; nothing unpickled
to plan; private by default; every bad run name and port one line.

The tests run as root: a second user's files are made by chown to uid 2002, and rig's checks are
asked for uid 2001 where the running user matters (root may trust only root's own)."""

from __future__ import annotations

import io
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest
from rig import cli, safefs
from rig.errors import RigError
from rig.launch import autoresume, checkpoints, nodes, resumecopy, rundir, runpolicy

from tests.helpers.fakesys import FakeSys

A, B = 2001, 2002


def _mine(path: Path, uid: int = A, mode: int | None = None) -> Path:
    os.chown(path, uid, uid)
    if mode is not None:
        os.chmod(path, mode)
    return path


def _run_of(project: Path, name: str, owner: str, uid: int = A) -> Path:
    """A run folder as rig makes it, belonging to uid, with weights/last.pt."""
    run = project / name
    (run / "weights").mkdir(parents=True)
    (run / rundir.OWNER_FILE).write_text(owner + "\n")
    (run / "weights/last.pt").write_bytes(b"x")
    for p in (run, run / "weights", run / rundir.OWNER_FILE, run / "weights/last.pt"):
        _mine(p, uid, 0o700 if p.is_dir() else 0o600)
    return run


class _Marker:
    """A pickle that, once loaded, writes a marker file: what another user plants as last.pt."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def _torch_zip(obj: Any, persistent: bool = False) -> bytes:
    """obj as torch.save's zip archive holds it (archive/data.pkl), tensors as persistent ids."""

    class P(pickle.Pickler):
        def persistent_id(self, o: Any) -> Any:
            return ("storage", "FloatStorage", "0", "cpu", 4) if persistent and o == "TENSOR" else None

    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/data/0", b"\0" * 16)
    return out.getvalue()


class Module:  # stands for a model class the checkpoint pickles (Ultralytics' DetectionModel)
    def __init__(self) -> None:
        self.weight = "TENSOR"


# --- (1) trust by ownership ----------------------------------------------------------------------


def test_another_users_folder_is_never_the_jobs_even_with_its_owner_file(tmp_path: Path) -> None:
    _run_of(tmp_path, "train-slurm-4243", "slurm-4243", uid=B)  # B's, naming A's next job
    (tmp_path / "train-slurm-4242").mkdir()  # no owner file: never adopted, whoever made it
    _mine(tmp_path / "train-slurm-4242", A, 0o700)
    found = rundir.scan(tmp_path, "train-slurm-4243", A)
    assert found[0].owner is None and "belongs to uid 2002" in str(found[0].problem)
    assert rundir.choose(tmp_path, "train-slurm-4243", found, "slurm-4243") == rundir.Choice(
        tmp_path / "train-slurm-4243-2", owned=False
    )
    found = rundir.scan(tmp_path, "train-slurm-4242", A)
    assert not rundir.choose(tmp_path, "train-slurm-4242", found, "slurm-4242").owned
    # The same folder, A's own: the job's.
    _run_of(tmp_path, "exp", "slurm-9", uid=A)
    assert rundir.choose(tmp_path, "exp", rundir.scan(tmp_path, "exp", A), "slurm-9").owned


@pytest.mark.parametrize(
    "spoil",
    [
        lambda run: os.chmod(run, 0o770),  # the group can swap what is inside
        lambda run: os.chmod(run / rundir.OWNER_FILE, 0o666),
        lambda run: os.chown(run / rundir.OWNER_FILE, B, B),
        lambda run: (
            (run / rundir.OWNER_FILE).unlink() or (run / rundir.OWNER_FILE).symlink_to("/etc/hostname")
        ),
    ],
    ids=["group-writable folder", "world-writable owner file", "owner file of B", "owner file a link"],
)
def test_an_owner_file_counts_only_when_the_user_alone_controls_it(tmp_path: Path, spoil: Any) -> None:
    run = _run_of(tmp_path, "exp", "slurm-9")
    spoil(run)
    found = rundir.scan(tmp_path, "exp", A)
    assert found[0].problem and not rundir.choose(tmp_path, "exp", found, "slurm-9").owned


def test_a_link_at_the_run_name_is_never_followed(tmp_path: Path) -> None:
    earlier = _run_of(tmp_path, "earlier", "slurm-1")
    (tmp_path / "train-slurm-4260").symlink_to(earlier)  # B's link to A's earlier run
    found = rundir.scan(tmp_path, "train-slurm-4260", A)
    assert "symbolic link" in str(found[0].problem)
    assert not rundir.choose(tmp_path, "train-slurm-4260", found, "slurm-1").owned
    with pytest.raises(RigError, match="train-slurm-4260 is a symbolic link, not a folder"):
        rundir.open_checkpoint(tmp_path / "train-slurm-4260", A)


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda run: os.chown(run / "weights/last.pt", B, B), r"last.pt belongs to uid 2002"),
        (lambda run: os.chmod(run / "weights/last.pt", 0o662), r"last.pt can be written by anyone"),
        (lambda run: os.chmod(run / "weights/last.pt", 0o660), r"last.pt can be written by gid 2001"),
        (lambda run: os.chown(run / "weights", B, B), r"weights belongs to uid 2002"),
        (lambda run: os.chmod(run / "weights", 0o777), r"weights can be written by anyone"),
        (  # a sticky folder of B's: B, its owner, may still rename what is inside
            lambda run: (os.chown(run / "weights", B, B), os.chmod(run / "weights", 0o1777)),
            r"weights belongs to uid 2002",
        ),
        (lambda run: os.chown(run, B, B), r"exp belongs to uid 2002"),
    ],
)
def test_resume_auto_reads_only_a_checkpoint_the_user_alone_controls(
    tmp_path: Path, spoil: Any, says: str
) -> None:
    run = _run_of(tmp_path, "exp", "slurm-9")
    spoil(run)
    read: list[object] = []
    with pytest.raises(RigError, match=says + ".*rig uses only run folders and checkpoints of your own"):
        autoresume.read_state(run, load=read.append, uid=A)  # type: ignore[arg-type]
    assert read == []  # refused before a byte of it was read


def test_a_weights_link_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    run = _run_of(tmp_path, "exp", "slurm-9")
    other = _run_of(tmp_path, "other", "slurm-1")
    (run / "weights/last.pt").unlink()
    (run / "weights").rmdir()
    (run / "weights").symlink_to(other / "weights")
    with pytest.raises(RigError, match=r"exp/weights is a symbolic link, not a folder"):
        autoresume.read_state(run, load=lambda _f: {}, uid=A)


def test_a_project_folder_another_user_made_is_never_written_into(tmp_path: Path) -> None:
    (tmp_path / "alice").mkdir()
    project = _mine(tmp_path / "alice", B, 0o777)  # B took /shared/runs/alice before alice ran
    with pytest.raises(RigError, match=r"project folder .*alice belongs to uid 2002.* never writes into"):
        rundir.check_project(project, A)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)  # root's, sticky: a cluster's runs folder
    rundir.check_project(shared, A)
    os.chmod(shared, 0o777)  # root's without the sticky bit: anyone may rename a run away
    with pytest.raises(RigError, match=r"can be written by anyone \(mode 0777\)"):
        rundir.check_project(shared, A)
    os.chown(project, 0, 0)  # as root, into a folder root does not own: refused too
    os.chown(project, A, A)
    with pytest.raises(
        RigError, match=r"belongs to uid 2001.* as root, run it as that user instead"
    ) as refused:
        rundir.check_project(project, 0)
    with pytest.raises(RigError, match=r"belongs to uid 2001") as as_user:
        rundir.check_project(project, B)
    assert "as root" not in str(as_user.value) and str(refused.value).count("\n") == 0
    os.chmod(project, 0o700)
    with pytest.raises(RigError, match=r"cannot create the run directory|never writes into"):
        rundir.claim(project, "train", None)  # we are root: A's folder is not ours
    assert list(project.iterdir()) == []


# --- (2) nothing unpickled to plan ---------------------------------------------------------------


def test_planning_reads_a_checkpoint_without_executing_it(tmp_path: Path) -> None:
    run = _run_of(tmp_path, "exp", "slurm-9", uid=0)
    marker = tmp_path / "marker"
    (run / "weights/last.pt").write_bytes(_torch_zip({"epoch": 0, "x": _Marker(marker)}))
    state = autoresume.read_state(run)
    assert state.exists and state.epoch == 0 and not marker.exists()
    (run / "weights/last.pt").write_bytes(_torch_zip(_Marker(marker)))
    with pytest.raises(RigError, match=r"cannot be read \(TypeError: not a checkpoint dictionary\)"):
        autoresume.read_state(run)
    assert not marker.exists()
    # What rig's trainer saves: its model classes and tensors inert, the values planning needs read.
    ckpt = {
        "epoch": 1,
        "train_args": {"epochs": 3},
        "ema": Module(),
        "optimizer": {"state": {0: {"exp_avg": "TENSOR"}}},
        "rig_resume": {"format": 1, "epoch": 2, "done": 4, "batches": 10},
    }
    (run / "weights/last.pt").write_bytes(_torch_zip(ckpt, persistent=True))
    state = autoresume.read_state(run)
    assert (state.epoch, state.epochs, state.stripped) == (1, 3, False)
    assert autoresume.decide(run, state).message.endswith("epoch 3/3 at batch 5/10")
    (run / "weights/last.pt").write_bytes(pickle.dumps({"epoch": 1}))  # not torch's archive
    with pytest.raises(RigError, match=r"cannot be read \(BadZipFile"):
        autoresume.read_state(run)


def test_resume_true_without_model_searches_only_the_users_own_runs(tmp_path: Path) -> None:
    mine = _run_of(tmp_path, "mine", "slurm-1")
    theirs = _run_of(tmp_path, "theirs", "slurm-2", uid=B)
    (tmp_path / "link").symlink_to(mine)
    os.utime(theirs / "weights/last.pt")
    assert list(rundir.own_checkpoints(tmp_path, uid=A)) == [mine / "weights/last.pt"]
    os.chown(mine / "weights/last.pt", B, B)
    assert list(rundir.own_checkpoints(tmp_path, uid=A)) == []


def test_resume_true_with_another_users_checkpoint_is_one_line(tmp_path: Path) -> None:
    theirs = _run_of(tmp_path, "theirs", "slurm-2", uid=A)
    last = theirs / "weights/last.pt"
    os.chown(last, B, B)
    who = safefs.Trust(A)
    with pytest.raises(RigError, match=r"last.pt belongs to uid 2002.*rig resumes only a checkpoint"):
        resumecopy.open_checked(last, who)
    os.chown(last, A, A)
    os.chown(theirs / "weights", B, B)  # A's own, in B's folder: B can swap it
    with pytest.raises(RigError, match=r"weights belongs to uid 2002"):
        resumecopy.open_checked(last, who)
    assert runpolicy.resumed_checkpoint({"resume": "True", "model": str(last)}) == last
    assert runpolicy.resumed_checkpoint({"resume": str(last)}) == last
    assert runpolicy.resumed_checkpoint({"model": str(last)}) is None  # a fresh run from weights
    assert runpolicy.resumed_checkpoint({"resume": "auto", "model": str(last)}) is None


# --- (3) private by default ----------------------------------------------------------------------


def test_run_folders_and_checkpoints_are_private_unless_shared_with_a_group(tmp_path: Path) -> None:
    run = rundir.claim(tmp_path, "train", None, environ={})
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert stat.S_IMODE((run / rundir.OWNER_FILE).stat().st_mode) == 0o600
    weights = run / "weights"
    assert stat.S_IMODE(weights.stat().st_mode) == 0o700  # made by rig, not by the umask
    checkpoints.write(weights / "last.pt", b"x")
    checkpoints.write(weights / "best.pt", lambda f: f.write(b"x"))
    assert {stat.S_IMODE(p.stat().st_mode) for p in weights.iterdir()} == {0o600}
    shared = rundir.claim(tmp_path, "shared", None, environ={safefs.SHARE_GROUP_ENV: "0"})
    assert stat.S_IMODE(shared.stat().st_mode) == 0o2750 and shared.stat().st_gid == 0
    assert stat.S_IMODE((shared / rundir.OWNER_FILE).stat().st_mode) == 0o640
    with pytest.raises(RigError, match="RIG_SHARE_GROUP='no-such-group' is not a group"):
        rundir.share_gid({safefs.SHARE_GROUP_ENV: "no-such-group"})


# --- (6) one line for every bad run name and port ------------------------------------------------


def _errors(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("INFO")]


def _plan(tmp_path: Path, capsys: Any, *extra: str) -> tuple[int, list[str]]:
    root = tmp_path / "sys"
    if not root.exists():
        FakeSys(root).node(0, "0-3").online("0-3")
    argv = ["train", "--sysfs-root", str(root), "--dry-run", "device=cpu", "data=x.yaml"]
    model = [] if any(a.startswith("model=") for a in extra) else ["model=m.yaml"]
    code = cli.main([*argv, *model, f"project={tmp_path}/runs", *extra])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("make", "args", "says"),
    [
        (lambda p: p.mkdir(mode=0), ["name=x", "exist_ok=True"], "cannot be listed and entered by you"),
        (lambda p: p.write_text(""), ["name=x", "exist_ok=True"], "is a file, not a folder"),
        (os.mkfifo, ["name=x", "exist_ok=True"], "is a FIFO, not a folder"),
        (lambda p: p.symlink_to(p), ["name=x", "resume=auto"], "x is a symbolic link, not a folder"),
        (
            lambda p: (p.mkdir(mode=0o700), (p / "weights").symlink_to("/etc")),
            ["name=x", "resume=auto"],
            "x/weights is a symbolic link",
        ),
        (None, ["name=" + "n" * 300], "is longer than 200 characters"),
        (None, ["name=a\nb"], "name=a\\nb: holds control or format characters"),
        (None, ["name=a\u0085b"], "name=a\\x85b: holds control or format characters"),  # NEL (C1)
        (None, ["name=a\u009bb"], "name=a\\x9bb: holds control or format characters"),  # CSI (C1)
        (None, ["name=a\u2028b"], "name=a\\u2028b: holds control or format"),  # line separator
        (None, ["name=a\u2029b"], "name=a\\u2029b: holds control or format"),  # paragraph separator
        (None, ["name=gpj.\u202eexe"], "name=gpj.\\u202eexe: holds control or format"),  # RTL override
        (None, ["name=a\u200bb"], "name=a\\u200bb: holds control or format"),  # zero width space
        (None, ["name=a\udcffb"], "name=a\\udcffb: holds control or format"),  # a byte that is not UTF-8
        (None, ["name=../../etc/cron.d"], "is not one folder name"),
        (
            None,
            ["name=x", "MASTER_PORT=70000"],
            "MASTER_PORT='70000': use a whole number between 1 and 65535",
        ),
    ],
    ids=[
        *("mode 000", "file", "fifo", "link loop", "weights link", "300 chars", "newline", "U+0085"),
        *("U+009B", "U+2028", "U+2029", "U+202E", "U+200B", "surrogate", "slash", "port"),
    ],
)
def test_every_bad_run_name_and_port_is_one_line_and_writes_nothing(
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
    plain_env: None,
    make: Any,
    args: list[str],
    says: str,
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    if make is not None:
        make(runs / "x")
    if args[-1].startswith("MASTER_PORT="):
        monkeypatch.setenv("MASTER_PORT", args.pop().split("=", 1)[1])
    before = sorted(os.listdir(runs))
    code, lines = _plan(tmp_path, capsys, *args)
    assert code == 1 and len(_errors(lines)) == 1 and says in lines[-1], lines
    assert sorted(os.listdir(runs)) == before


@pytest.mark.parametrize("name", ["résumé-実験", "run.v2_final", "ünï-ćödé", "λ"])
def test_names_in_any_script_are_names(name: str) -> None:
    assert rundir.check_name(name) == name


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("²", "RIG_SHARE_GROUP='²' is not a group of this system"),
        ("99999999999999999999", "RIG_SHARE_GROUP='99999999999999999999' is not a group id"),
        ("4294967295", "RIG_SHARE_GROUP='4294967295' is not a group id (0 to 4294967294)"),
    ],
)
def test_a_bad_share_group_is_one_line_in_a_dry_run(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, plain_env: None, raw: str, says: str
) -> None:
    monkeypatch.setenv(safefs.SHARE_GROUP_ENV, raw)
    code, lines = _plan(tmp_path, capsys)
    assert code == 1 and _errors(lines) == [lines[-1]] and lines[-1].startswith(f"ERROR rig: {says}"), lines


def test_master_port_bounds() -> None:
    for bad in ("0", "65536", "-1"):
        with pytest.raises(RigError, match=f"^MASTER_PORT='{bad}': use a whole number between 1 and 65535$"):
            nodes.node_spec({"MASTER_PORT": bad})
    assert nodes.node_spec({"MASTER_PORT": "65535"}).master_port == 65535


def test_a_dry_run_never_takes_another_users_checkpoint_to_resume(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, plain_env: None
) -> None:
    monkeypatch.chdir(tmp_path)  # Ultralytics' runs_dir: ./runs
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    theirs = _run_of(runs, "train", "slurm-2", uid=B)
    code, lines = _plan(tmp_path, capsys, "resume=True")  # the newest last.pt: only B's is there
    assert code == 1 and _errors(lines) == [
        f"ERROR rig: resume=True: no last.pt under {runs}; give model=path/to/last.pt"
    ]
    code, lines = _plan(tmp_path, capsys, "resume=True", f"model={theirs}/weights/last.pt")
    assert code == 1 and len(_errors(lines)) == 1 and f"{theirs} belongs to uid 2002" in lines[-1], lines


def test_run_folders_stay_private_under_a_group_writable_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)  # Debian and Ubuntu users' own default
    try:
        claimed = rundir.claim(tmp_path, "train", "slurm-5", environ={})
        as_is = tmp_path / "named"
        rundir.make_run_dir(as_is, environ={})
    finally:
        os.umask(old)
    for run in (claimed, as_is):
        assert stat.S_IMODE(run.stat().st_mode) == 0o700
        assert stat.S_IMODE((run / "weights").stat().st_mode) == 0o700
        rundir.check_run_dir(run)  # a resume=auto of it trusts what rig made
