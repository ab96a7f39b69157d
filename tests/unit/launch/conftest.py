"""Fixtures the launch tests share."""

from __future__ import annotations

import os

import pytest
from rig.launch import trainplan


@pytest.fixture
def plain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No scheduler's, torchrun's or rig's variables from the box running the tests."""
    for k in [k for k in os.environ if k.startswith(("SLURM_", "PET_", "RIG_"))]:
        monkeypatch.delenv(k)
    for k in (*trainplan.RENDEZVOUS_VARIABLES, "NNODES", "NODE_RANK"):
        monkeypatch.delenv(k, raising=False)
