"""seed_notebooks: first start copies, later starts never overwrite what the user changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rig.workspace import MANIFEST, Action, FileState, decide, seed_notebooks

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

    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert seed_notebooks(src, linked) == {}
    assert not (tmp_path / "elsewhere").exists()


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


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_as_root_files_belong_to_the_workspace_owner(tmp_path: Path) -> None:
    src = _baked(tmp_path, quickstart="v1")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.chown(workspace, 1234, 1234)
    seed_notebooks(src, workspace / "notebooks")
    st = (workspace / "notebooks" / "quickstart.ipynb").stat()
    assert (st.st_uid, st.st_gid) == (1234, 1234)
