"""The Ultralytics adapter on a host without Ultralytics: its settings' folders and the fallbacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rig.yolo import ultra


@pytest.fixture
def no_home_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("YOLO_CONFIG_DIR")


def _settings(tmp_path: Path, **dirs: str) -> dict[str, str]:
    cfg = tmp_path / "cfg/Ultralytics"
    cfg.mkdir(parents=True)
    (cfg / "settings.json").write_text(json.dumps({"sync": False, **dirs}))
    return {"YOLO_CONFIG_DIR": str(tmp_path / "cfg")}


def test_settings_dirs_are_the_settings_files(tmp_path: Path) -> None:
    environ = _settings(tmp_path, weights_dir="/w", datasets_dir="/d", runs_dir="/r")
    assert ultra.settings_dirs(environ) == {
        "weights_dir": Path("/w"),
        "datasets_dir": Path("/d"),
        "runs_dir": Path("/r"),
    }
    assert ultra.datasets_dir(environ) == Path("/d")


def test_settings_dirs_without_a_file_are_the_images(no_home_settings: None) -> None:
    dirs = ultra.settings_dirs({})
    assert (dirs["weights_dir"], dirs["datasets_dir"]) == (Path("/weights"), Path("/datasets"))
    assert dirs["runs_dir"] == Path("runs").absolute()


def test_without_yolo_config_dir_the_users_file(tmp_path: Path, no_home_settings: None) -> None:
    _settings(tmp_path / "home", datasets_dir="/mine")
    (tmp_path / "home/cfg").rename(tmp_path / "home/.config")  # where Ultralytics looks without the variable
    assert ultra.datasets_dir({}) == Path("/mine")


def test_an_unreadable_settings_file_gives_the_defaults(tmp_path: Path) -> None:
    environ = _settings(tmp_path)
    (tmp_path / "cfg/Ultralytics/settings.json").write_text("{not json")
    assert ultra.datasets_dir(environ) == Path("/datasets")


def test_datasets_dir_seen_from_a_root(tmp_path: Path) -> None:
    environ = _settings(tmp_path, datasets_dir="/data/sets")
    assert ultra.datasets_dir(environ, root=tmp_path / "fake") == tmp_path / "fake/data/sets"


def test_fallbacks_without_ultralytics() -> None:
    if ultra.importable():
        pytest.skip("Ultralytics is installed here: the image test compares the fallbacks with it")
    assert ultra.default("imgsz") == ultra.DEFAULT_IMGSZ == 640
    assert ultra.default("batch") == ultra.DEFAULT_BATCH == 16
    assert ultra.image_formats() == ultra.IMG_FORMATS_FALLBACK
    assert ultra.version() == ""
    assert ultra.check_dataset("coco8.yaml") is None
    with pytest.raises(ImportError):
        ultra.cfg_module()


@pytest.mark.parametrize(
    ("text", "value"),
    [("True", True), ("false", False), ("none", None), ("16", 16), ("-1", -1), ("default", "default")],
)
def test_smart_value_fallback_types_switches_and_numbers(text: str, value: object) -> None:
    assert ultra.smart_value(text) == value


def test_a_swap_takes_only_the_names_the_contract_lists_and_puts_everything_back() -> None:
    from types import SimpleNamespace

    from rig.yolo import contract

    module = SimpleNamespace(check_amp="theirs")
    with ultra.swapped(contract.EngineTrainer, module, check_amp="ours", enumerate="numbered"):
        assert (module.check_amp, module.enumerate) == ("ours", "numbered")  # type: ignore[attr-defined]
    assert module.check_amp == "theirs" and not hasattr(module, "enumerate")  # a builtin it reads: removed
    listed_as_called = ultra.swapped(contract.CfgModule, module, get_cfg="ours")
    with pytest.raises(TypeError, match="get_cfg: not listed as swapped"), listed_as_called:
        pass
    swaps = {"InfiniteDataLoader", "YOLODataset", "YOLOMultiModalDataset"}
    assert ultra.swappable(contract.DataBuild) == swaps
