"""seed_notebooks: first start copies, later starts never overwrite what the user changed."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from rig.workstation import users, workspace
from rig.workstation.workspace import MANIFEST, Action, FileState, decide, seed_notebooks
from rig.yolo import settings

S, D, OLD = "src-hash", "dst-hash", "old-hash"


@pytest.mark.parametrize(
    ("dst_hash", "seeded_hash", "expected"),
    [
        (None, None, Action.COPY),  # first start
        (None, OLD, Action.KEEP_DELETED),  # the user deleted a seeded notebook
        (S, None, Action.UNCHANGED),
        (S, S, Action.UNCHANGED),
        (OLD, OLD, Action.UPDATE),  # untouched copy of an older image's notebook
        (D, OLD, Action.KEEP_EDITED),  # the user edited it
        (D, None, Action.KEEP_EDITED),  # a file of that name the user made before seeding
    ],
)
def test_decide(dst_hash: str | None, seeded_hash: str | None, expected: Action) -> None:
    assert decide(FileState("q.ipynb", S, dst_hash, seeded_hash)) is expected


def _baked(tmp_path: Path, **files: str) -> Path:
    src = tmp_path / "opt" / "notebooks"
    src.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (src / f"{name}.ipynb").write_text(text)
    return src


def test_first_start_copies_then_keeps_user_edits(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1", explore="e1")
    (src / "README.txt").write_text("not a notebook")
    dst = tmp_path / "workspace" / "notebooks"
    dst.parent.mkdir()

    first = seed_notebooks(src, dst)
    assert first == {"explore.ipynb": Action.COPY, "quickstart.ipynb": Action.COPY}
    assert (dst / "quickstart.ipynb").read_text() == "v1"
    assert not (dst / "README.txt").exists()
    assert oct((dst / "quickstart.ipynb").stat().st_mode & 0o777) == "0o644"

    (dst / "quickstart.ipynb").write_text("my edits")
    (dst / "explore.ipynb").unlink()
    second = seed_notebooks(src, dst)
    assert second == {"explore.ipynb": Action.KEEP_DELETED, "quickstart.ipynb": Action.KEEP_EDITED}
    assert (dst / "quickstart.ipynb").read_text() == "my edits"
    assert not (dst / "explore.ipynb").exists()


def test_new_image_updates_only_untouched_copies(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1", explore="e1")
    dst = tmp_path / "notebooks"
    seed_notebooks(src, dst)
    (dst / "explore.ipynb").write_text("my analysis")

    _baked(tmp_path, quickstart="v2", explore="e2", augment="a1")  # the next image version
    result = seed_notebooks(src, dst)
    assert result == {
        "augment.ipynb": Action.COPY,
        "explore.ipynb": Action.KEEP_EDITED,
        "quickstart.ipynb": Action.UPDATE,
    }
    assert (dst / "quickstart.ipynb").read_text() == "v2"
    assert (dst / "explore.ipynb").read_text() == "my analysis"
    manifest = json.loads((dst / MANIFEST).read_text())
    assert set(manifest) == {"augment.ipynb", "explore.ipynb", "quickstart.ipynb"}


def test_a_symlink_in_the_workspace_is_never_followed(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1")
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    dst = tmp_path / "notebooks"
    dst.mkdir()
    (dst / "quickstart.ipynb").symlink_to(outside)

    assert seed_notebooks(src, dst) == {"quickstart.ipynb": Action.KEEP_EDITED}
    assert outside.read_text() == "precious"

    (tmp_path / "elsewhere").mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert seed_notebooks(src, linked) == {}
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_corrupt_manifest_is_treated_as_first_start(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1")
    dst = tmp_path / "notebooks"
    dst.mkdir()
    (dst / MANIFEST).write_text("{not json")
    assert seed_notebooks(src, dst) == {"quickstart.ipynb": Action.COPY}
    assert json.loads((dst / MANIFEST).read_text())["quickstart.ipynb"]


def test_missing_source_seeds_nothing(tmp_path: Path) -> None:
    assert seed_notebooks(tmp_path / "absent", tmp_path / "dst") == {}
    assert not (tmp_path / "dst").exists()


# ---- what a hostile user can leave in the workspace: one WARNING each, never a hang or a crash ----
def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_fifo_manifest_does_not_hang(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = _baked(tmp_path, quickstart="v1")
    dst = tmp_path / "notebooks"
    dst.mkdir()
    os.mkfifo(dst / MANIFEST)
    assert seed_notebooks(src, dst) == {}
    assert _warnings(caplog) == [
        f"skipped {dst / MANIFEST}: it is a FIFO, not a regular file; "
        "remove it to have the notebooks seeded again"
    ]


def test_a_manifest_linked_to_a_secret_or_dev_zero_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _baked(tmp_path, quickstart="v1")
    secret = tmp_path / "secret"
    secret.write_text('{"quickstart.ipynb": "cloud-key"}')
    for target in (secret, Path("/dev/zero")):
        dst = tmp_path / f"notebooks-{target.name}"
        dst.mkdir()
        (dst / MANIFEST).symlink_to(target)
        caplog.clear()
        assert seed_notebooks(src, dst) == {}
        assert (dst / MANIFEST).is_symlink()
        assert len(_warnings(caplog)) == 1 and "it is a symbolic link" in _warnings(caplog)[0]
    assert secret.read_text() == '{"quickstart.ipynb": "cloud-key"}'


def test_a_folder_for_the_manifest_or_a_file_for_the_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _baked(tmp_path, quickstart="v1")
    dst = tmp_path / "notebooks"
    (dst / MANIFEST).mkdir(parents=True)
    assert seed_notebooks(src, dst) == {}
    assert "it is a folder, not a regular file" in _warnings(caplog)[0]

    caplog.clear()
    as_file = tmp_path / "ws" / "notebooks"
    as_file.parent.mkdir()
    as_file.write_text("mine")
    assert seed_notebooks(src, as_file) == {}
    assert _warnings(caplog) == [
        f"skipped {as_file}: it is a file, not a folder; move it away to get the notebooks"
    ]
    assert as_file.read_text() == "mine"


def test_a_huge_sparse_notebook_is_skipped_unread(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = _baked(tmp_path, quickstart="v1", explore="e1")
    dst = tmp_path / "notebooks"
    dst.mkdir()
    with (dst / "quickstart.ipynb").open("wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse
    result = seed_notebooks(src, dst)
    assert result == {"explore.ipynb": Action.COPY, "quickstart.ipynb": Action.KEEP_EDITED}
    assert len(_warnings(caplog)) == 1 and "larger than 64 MiB" in _warnings(caplog)[0]
    assert (dst / "quickstart.ipynb").stat().st_size == 1 << 40


def test_runs_that_is_a_file_or_a_link_is_left_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = _baked(tmp_path, quickstart="v1")
    target = tmp_path / "root-owned"
    target.mkdir(mode=0o700)
    for what in ("file", "link"):
        ws = tmp_path / f"ws-{what}"
        ws.mkdir()
        if what == "file":
            (ws / "runs").write_text("x")
        else:
            (ws / "runs").symlink_to(target, target_is_directory=True)
        caplog.clear()
        workspace.prepare_as_user(ws, src)
        assert len(_warnings(caplog)) == 1 and _warnings(caplog)[0].startswith(
            f"skipped {ws / 'runs'}: it is"
        )
        assert (ws / "notebooks" / "quickstart.ipynb").read_text() == "v1"
    assert oct(target.stat().st_mode & 0o777) == "0o700" and list(target.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_prepare_runs_as_the_user_not_root(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1")
    base = Path(tempfile.mkdtemp(prefix="rig-ws-"))  # tmp_path's parents are root-only
    try:
        base.chmod(0o755)
        ws = base / "workspace"
        ws.mkdir()
        os.chown(ws, 4321, 4322)
        secret = base / "secret"
        secret.write_text("root only")
        secret.chmod(0o600)
        (ws / "notebooks").mkdir()
        os.chown(ws / "notebooks", 4321, 4322)
        os.symlink(secret, ws / "notebooks" / MANIFEST)
        assert workspace.prepare(users.Ids(4321, 4322), timeout=30, workspace=ws, notebooks=src)
        st = (ws / "runs").stat()
        assert (st.st_uid, st.st_gid) == (4321, 4322)
        # The link was skipped; the secret is untouched and nothing readable was made from it.
        assert secret.read_text() == "root only" and secret.stat().st_uid == 0
        assert not (ws / "notebooks" / "quickstart.ipynb").exists()
    finally:
        shutil.rmtree(base)


def test_prepare_gives_up_on_a_child_that_hangs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(workspace.users, "drop_privileges", lambda ids: None)
    monkeypatch.setattr(workspace, "prepare_as_user", lambda **_: time.sleep(60))
    started = time.monotonic()
    assert workspace.prepare(users.Ids(os.getuid(), os.getgid()), timeout=0.5) is False
    assert time.monotonic() - started < 5
    assert (
        "took longer than 0 s; skipped" in _warnings(caplog)[0] or "took longer than" in _warnings(caplog)[0]
    )


def test_prepare_seeds_ultralytics_settings_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    baked = tmp_path / "opt/ultralytics"
    (baked / "Ultralytics").mkdir(parents=True)
    (baked / "Ultralytics/settings.json").write_text('{"tensorboard": true}')
    monkeypatch.setattr(settings, "BAKED_CONFIG_DIR", baked)
    ws = tmp_path / "workspace"
    ws.mkdir()
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(ws / ".config"))
    workspace.prepare_as_user(ws, tmp_path / "no-notebooks")
    assert json.loads((ws / ".config/Ultralytics/settings.json").read_text()) == {"tensorboard": True}
