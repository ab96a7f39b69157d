"""`rig serve`: state it keeps in the volume."""

from __future__ import annotations

from pathlib import Path


def test_generated_token_is_kept(tmp_path: Path) -> None:
    from rig.commands.serve import load_or_create_token

    token = load_or_create_token(tmp_path / "state/jupyter_token")
    assert len(token) == 48
    assert (tmp_path / "state/jupyter_token").stat().st_mode & 0o777 == 0o600
    assert load_or_create_token(tmp_path / "state/jupyter_token") == token
