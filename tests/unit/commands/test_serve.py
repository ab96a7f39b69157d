"""`rig serve`'s own preparation: JupyterLab's runtime folder is new and empty at every start."""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
