"""What a run folder's checkpoints hold, read inside a test container by the scripts in
tests/scripts (torch is the image's, not the host's)."""

from __future__ import annotations

import json
from typing import Any

from tests.helpers.containers import Containers


def _read(containers: Containers, c: Any, script: str, weights: str) -> dict[str, Any]:
    rc, out = containers.exec(c, ["python", f"/tests/{script}", weights], 120)
    assert rc == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def epochs(containers: Containers, c: Any, weights: str) -> dict[str, Any]:
    """{name: [Ultralytics' epoch, rig's position or None, best epoch, when rig saved it]}"""
    return _read(containers, c, "checkpoint_epochs.py", weights)


def updates(containers: Containers, c: Any, weights: str) -> dict[str, Any]:
    """{name: [the EMA's updates, the dtype of Ultralytics' EMA, of rig's (None without)]}"""
    return _read(containers, c, "checkpoint_ema.py", weights)
