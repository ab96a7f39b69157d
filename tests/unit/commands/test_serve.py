"""`rig serve`'s own preparation: JupyterLab's runtime folder is new and empty at every start."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from rig import cli
from rig.commands.serve import fresh_runtime_dir
from rig.workstation import users


def test_the_runtime_folder_is_made_afresh_and_only_the_services_user_may_enter(tmp_path: Path) -> None:
    runtime = tmp_path / "run/rig/jupyter"
    ids = users.Ids(os.getuid(), os.getgid())  # root chowns it to yolo; here to whoever runs the test
    fresh_runtime_dir(runtime, ids)
    (runtime / "kernel-1.json").write_text("{}")
    (runtime / "jupyter_cookie_secret").write_text("planted")
    (runtime / "deep").mkdir()
    (runtime / "deep/link").symlink_to(tmp_path)
    fresh_runtime_dir(runtime, ids)
    assert list(runtime.iterdir()) == []
    st = runtime.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and (st.st_uid, st.st_gid) == (ids.uid, ids.gid)
    assert tmp_path.is_dir()  # the link was removed, not followed


def test_under_apptainer_serve_is_one_line_naming_what_to_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 4321)
    monkeypatch.setenv("APPTAINER_CONTAINER", "/scratch/yolo-rig.sif")
    assert cli.main(["serve"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "ERROR rig: rig serve (sshd, JupyterLab, TensorBoard) cannot run"
    ), err
    assert "uid 4321" in err[0] and "apptainer run --nv IMAGE rig train" in err[0] and "jupyter lab" in err[0]
    monkeypatch.delenv("APPTAINER_CONTAINER")
    assert cli.main(["serve"]) == 1  # docker run --user: the fix is Docker's
    assert "remove `--user`" in capsys.readouterr().err
