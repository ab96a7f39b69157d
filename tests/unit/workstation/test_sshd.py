"""sshd's state kept in the volume."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.errors import RigError
from rig.workstation import sshd

from tests.helpers import needs_ssh_keygen


# ---- state kept in the volume ------------------------------------------------------------------
@needs_ssh_keygen
def test_host_keys_are_generated_once(tmp_path: Path) -> None:
    first = sshd.ensure_host_keys(tmp_path / "ssh")
    assert [p.rsplit("(", 1)[1] for p in first] == ["ED25519)", "ECDSA)"]
    assert sshd.ensure_host_keys(tmp_path / "ssh") == first
    assert (tmp_path / "ssh/ssh_host_ed25519_key").stat().st_mode & 0o777 == 0o600
    (tmp_path / "ssh/ssh_host_ecdsa_key").write_text("garbage")
    with pytest.raises(RigError, match="delete it and restart"):
        sshd.ensure_host_keys(tmp_path / "ssh")
