"""Our Ultralytics defaults: the overlay baked into default.yaml, and the upstream values it replaced.

Both files are written at build time (docker/merge-ultralytics-cfg.py) under RIG_CONFIGS_DIR;
`rig bench` reads them to measure stock against ours in one run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from rig import paths

OVERLAY_NAME = "ultralytics.yaml"
UPSTREAM_NAME = "upstream.yaml"


def configs_dir() -> Path:
    return Path(os.environ.get("RIG_CONFIGS_DIR", str(paths.OPT / "configs")))


def _load(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}
    return dict(data) if isinstance(data, dict) else {}


def overlay_values(root: Path | None = None) -> dict[str, Any]:
    """The keys we change, with our values."""
    return _load((root or configs_dir()) / OVERLAY_NAME)


def upstream_values(root: Path | None = None) -> dict[str, Any]:
    """The pinned Ultralytics' own values for the keys we change ({} outside the image)."""
    return _load((root or configs_dir()) / UPSTREAM_NAME)
