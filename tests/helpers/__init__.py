"""What the tests share: the repository's paths and skip marks; helpers in the modules beside
(containers, waiting, fake datasets, fake /sys trees, the compose workstation)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "entrypoint"
NOTEBOOKS = REPO / "notebooks"
SCRIPTS = REPO / "tests" / "scripts"  # copied into containers by the image tests

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
