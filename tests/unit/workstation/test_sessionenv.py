"""The session environment: what SSH logins and Jupyter terminals see, without secrets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rig.workstation import sessionenv

# ---- session environment -----------------------------------------------------------------------
TRICKY = {
    "PATH": "/opt/venv/bin:/usr/bin:/bin",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "RIG_QUOTES": 'it\'s "quoted" $HOME `id` \\n back\\slash; #not-a-comment',
    "RIG_MULTILINE": "one\ntwo",
    "SSH_PASSWORD": "hunter22",
    "JUPYTER_TOKEN": "secret-token",
    "HOME": "/root",
    "SSH_PUBLIC_KEY": "ssh-ed25519 AAAA",
    "BAD-NAME": "x",
}


def test_session_variables_drop_secrets_and_per_session_values() -> None:
    names = set(sessionenv.session_variables(TRICKY))
    assert names == {"PATH", "CUDA_DEVICE_ORDER", "RIG_QUOTES", "RIG_MULTILINE"}


def test_profile_round_trips_through_bash(tmp_path: Path) -> None:
    profile = tmp_path / "rig-env.sh"
    profile.write_text(sessionenv.render_profile(TRICKY))
    env = {"PATH": "/usr/bin:/bin", "JUPYTER_TOKEN": "leak", "HOME": str(tmp_path)}
    out = subprocess.run(
        ["bash", "-c", f". {profile}; python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    seen = json.loads(out)
    for name in ("PATH", "CUDA_DEVICE_ORDER", "RIG_QUOTES", "RIG_MULTILINE"):
        assert seen[name] == TRICKY[name]
    assert "JUPYTER_TOKEN" not in seen
    assert seen["HOME"] == str(tmp_path)


def test_sshd_setenv_is_one_line_quoted_for_sshd() -> None:
    text = sessionenv.render_sshd(TRICKY)
    setenv = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(setenv) == 1 and setenv[0].startswith("SetEnv ")
    assert '"RIG_QUOTES=it\'s \\"quoted\\" $HOME `id` \\\\n back\\\\slash; #not-a-comment"' in setenv[0]
    assert "RIG_MULTILINE" not in text and "hunter22" not in text and "secret-token" not in text
