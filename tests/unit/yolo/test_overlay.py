"""The build-time merge of configs/ultralytics.yaml into Ultralytics' default.yaml (host tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO

SCRIPT = REPO / "docker/merge-ultralytics-cfg.py"
OVERLAY = REPO / "configs/ultralytics.yaml"

UPSTREAM = """\
# Ultralytics default settings
task: detect # (str) YOLO task
cache: False # (bool | str) cache images in RAM (True/'ram') or on 'disk'
workers: 8 # (int) dataloader workers (per RANK if DDP)
deterministic: True # (bool) enable deterministic ops
plots: True
"""


def merge(tmp_path: Path, overlay: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    (tmp_path / "overlay.yaml").write_text(overlay)
    default = tmp_path / "default.yaml"
    default.write_text(UPSTREAM)
    record = tmp_path / "configs/upstream.yaml"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "overlay.yaml"), str(default), str(record)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return proc, default, record


def test_merge_changes_only_overlay_keys(tmp_path: Path) -> None:
    proc, default, record = merge(tmp_path, "# why\ncache: ram\nworkers: 4\n")
    assert proc.returncode == 0, proc.stderr
    merged = yaml.safe_load(default.read_text())
    assert merged == {**yaml.safe_load(UPSTREAM), "cache": "ram", "workers": 4}
    assert yaml.safe_load(record.read_text()) == {"cache": False, "workers": 8}
    assert "# Ultralytics default settings" in default.read_text()  # layout and comments kept
    assert "INFO merge-ultralytics-cfg: cache: False -> 'ram'" in proc.stdout


def test_unknown_key_fails_and_leaves_file(tmp_path: Path) -> None:
    proc, default, record = merge(tmp_path, "cache: ram\ncahce_typo: 1\n")
    assert proc.returncode != 0
    assert "cahce_typo" in proc.stderr and "does not have" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert default.read_text() == UPSTREAM
    assert not record.exists()


def test_the_real_overlay_is_small_and_documented() -> None:
    overlay = yaml.safe_load(OVERLAY.read_text()) or {}
    assert isinstance(overlay, dict)
    # Plain yolo keeps Ultralytics' cache: False (validation and classification cache too, and
    # neither respects a container's memory limit); `rig train` decides it per launch.
    assert "cache" not in overlay
    lines = OVERLAY.read_text().splitlines()
    for key in overlay:
        i = next(n for n, line in enumerate(lines) if line.startswith(f"{key}:"))
        assert lines[i - 1].startswith("#"), f"{key} needs a comment saying why, with the measurement"
