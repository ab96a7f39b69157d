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


def test_authorized_keys_are_written_atomically_over_whatever_was_there(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("untouched\n")
    keys_dir = tmp_path / "authorized_keys"
    keys_dir.mkdir()
    (keys_dir / "yolo").symlink_to(elsewhere)  # replaced, never followed (rig.safefs.write_file)
    sshd.install_keys([sshd.PublicKey("ssh-ed25519 AAAA k1", "test")], "yolo", keys_dir)
    assert (keys_dir / "yolo").read_text() == "ssh-ed25519 AAAA k1\n" and not (keys_dir / "yolo").is_symlink()
    assert (keys_dir / "yolo").stat().st_mode & 0o777 == 0o644 and elsewhere.read_text() == "untouched\n"
    assert sorted(p.name for p in keys_dir.iterdir()) == ["yolo"]  # no temporary file left
