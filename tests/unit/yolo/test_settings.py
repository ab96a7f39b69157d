"""Ultralytics' settings: seeded once into the user's folder, never overwritten, never through a link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rig.yolo import settings


def baked(tmp_path: Path) -> Path:
    folder = tmp_path / "opt/Ultralytics"
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text(json.dumps({"tensorboard": True, "runs_dir": "/workspace/runs"}))
    (folder / "Arial.ttf").symlink_to("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    return folder


def test_seed_copies_the_defaults_once_and_keeps_the_users_changes(tmp_path: Path) -> None:
    src = baked(tmp_path)
    (tmp_path / "workspace").mkdir()
    config = tmp_path / "workspace/.config"
    assert settings.seed(config, src) == ["Arial.ttf", "settings.json"]
    file = config / "Ultralytics/settings.json"
    assert json.loads(file.read_text())["tensorboard"] is True
    assert os.readlink(config / "Ultralytics/Arial.ttf") == "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    file.write_text(json.dumps({"tensorboard": False}))  # `yolo settings tensorboard=False`
    assert settings.seed(config, src) == []
    assert json.loads(file.read_text()) == {"tensorboard": False}


def test_seed_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    src = baked(tmp_path)
    (tmp_path / "workspace/.config/Ultralytics").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "workspace/.config/Ultralytics/settings.json").symlink_to(victim)
    settings.seed(tmp_path / "workspace/.config", src)
    assert victim.read_text() == "keep"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ws2").mkdir()
    (tmp_path / "ws2/.config").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(settings.safefs.Skipped):
        settings.seed(tmp_path / "ws2/.config", src)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_environ_root_gets_the_baked_defaults_and_a_user_its_own(tmp_path: Path) -> None:
    env = {"YOLO_CONFIG_DIR": "/workspace/.config"}
    assert settings.prepared_environ(env, root=True)["YOLO_CONFIG_DIR"] == str(settings.BAKED_CONFIG_DIR)
    baked_env = {"YOLO_CONFIG_DIR": str(settings.BAKED_CONFIG_DIR)}
    assert settings.prepared_environ(baked_env, root=False) == baked_env
    # A folder this process cannot make (no /workspace here): the baked defaults, read-only.
    missing = {"YOLO_CONFIG_DIR": str(tmp_path / "absent/.config")}
    assert settings.prepared_environ(missing, root=False)["YOLO_CONFIG_DIR"] == str(settings.BAKED_CONFIG_DIR)


def test_settings_file_follows_ultralytics_rules() -> None:
    assert settings.settings_file({"YOLO_CONFIG_DIR": "/c"}) == Path("/c/Ultralytics/settings.json")
    assert settings.settings_file({}) == Path.home() / ".config/Ultralytics/settings.json"


def test_problem_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "c/Ultralytics"
    env = {"YOLO_CONFIG_DIR": str(tmp_path / "c")}
    assert settings.problem(env) is not None  # no folder at all
    folder.mkdir(parents=True)
    assert settings.problem(env) is None  # Ultralytics will create it
    (folder / "settings.json").symlink_to(tmp_path / "x")
    assert "is a link" in (settings.problem(env) or "")
