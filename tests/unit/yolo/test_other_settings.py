"""Another Ultralytics in ~/.local gets a settings file of its own schema, seeded from the user's, and
the user's file stays as it is: the decision on fake Ultralytics trees (their SettingsManager source
as Ultralytics writes it), and the guard through a real `import ultralytics` in a fresh Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rig.yolo import import_guard, other_settings

from tests.helpers import REPO

# ultralytics/utils/__init__.py as 8.4.100 (schema 0.0.6) and 8.4.190 (0.0.8) write SettingsManager.
SOURCE = '''\
import hashlib

SETTINGS_FILE = "x"


class SettingsManager(JSONDict):
    """SettingsManager class for managing and persisting Ultralytics settings.{docstring}

    Examples:
        >>> settings = SettingsManager()
    """

    def __init__(self, file=SETTINGS_FILE, version="{version}"):
        root = GIT.root or Path()
        datasets_root = (root.parent if GIT.root else root).resolve()

        self.file = Path(file)
        self.version = version
        self.defaults = {{
            "settings_version": version,  # Settings schema version
            "datasets_dir": str(datasets_root / "datasets"),  # Datasets directory
            "runs_dir": str(root / "runs"),  # Experiment runs directory
            "uuid": hashlib.sha256(str(uuid.getnode()).encode()).hexdigest(),  # SHA-256 anonymized UUID hash
            "sync": True,  # Enable synchronization
{extra}            "tensorboard": False,  # TensorBoard logging
        }}

    def _validate_settings(self):
        pass


def deprecation_warn(arg, new_arg=None):
    self = None
    self.defaults = {{"not": "these"}}
'''
OLD_KEYS = '            "hub": True,  # Ultralytics HUB integration\n            "neptune": True,\n'
IMAGE_SETTINGS = {
    "settings_version": "0.0.8",
    "datasets_dir": "/datasets",
    "runs_dir": "/workspace/mine",  # the user's change
    "uuid": "",
    "sync": False,
    "tensorboard": True,
}


def ultralytics(site: Path, version: str, extra: str = "", docstring: str = "") -> Path:
    """A fake Ultralytics in site: its settings schema, and an __init__ that prints where it is told
    its settings are (YOLO_CONFIG_DIR at import)."""
    package = site / "ultralytics"
    (package / "utils").mkdir(parents=True)
    (package / "utils" / "__init__.py").write_text(
        SOURCE.format(version=version, extra=extra, docstring=docstring)
    )
    (package / "__init__.py").write_text(
        f'__version__ = "8.4.{version[-1]}"\nimport os\nprint("CONFIG", os.environ.get("YOLO_CONFIG_DIR"))\n'
    )
    return package


@pytest.fixture
def box(tmp_path: Path) -> dict[str, Path]:
    """The image's site-packages with its Ultralytics (0.0.8), a user's with an older one (0.0.6),
    and the user's settings folder holding the image's settings with one change, and a font link."""
    image, user, config = tmp_path / "image", tmp_path / "user", tmp_path / "workspace/.config"
    ultralytics(image, "0.0.8")
    ultralytics(user, "0.0.6", OLD_KEYS)
    (config / "Ultralytics").mkdir(parents=True)
    (config / "Ultralytics/settings.json").write_text(json.dumps(IMAGE_SETTINGS, indent=2))
    (config / "Ultralytics/Arial.ttf").symlink_to("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    return {"image": image, "user": user, "config": config}


def test_the_schema_comes_from_the_source_of_settings_manager(box: dict[str, Path]) -> None:
    schema = other_settings.read_schema(box["user"] / "ultralytics")
    assert schema is not None and schema.version == "0.0.6"
    assert list(schema.defaults) == [
        "settings_version",
        "datasets_dir",
        "runs_dir",
        "uuid",
        "sync",
        "hub",
        "neptune",
        "tensorboard",
    ]
    assert schema.defaults["hub"] == (bool, True) and schema.defaults["settings_version"] == (str, "0.0.6")
    assert schema.defaults["runs_dir"][0] is str  # computed at run time: its type only
    image = other_settings.read_schema(box["image"] / "ultralytics")
    assert image is not None and other_settings.fits(IMAGE_SETTINGS, image)
    assert not other_settings.fits(IMAGE_SETTINGS, schema)
    assert not other_settings.fits({**IMAGE_SETTINGS, "sync": "no"}, image)  # a wrong type resets too
    assert other_settings.read_schema(box["user"] / "nothing") is None
    # A line of its docstring in column 0 ends the class early: the whole module is read then.
    odd = ultralytics(box["user"].parent / "odd", "0.0.7", docstring="\n\nA line in column 0.")
    assert other_settings.read_schema(odd) == other_settings.Schema(
        "0.0.7", {**image.defaults, "settings_version": (str, "0.0.7")}
    )


def test_an_older_schema_gets_its_own_folder_seeded_with_the_users_values(box: dict[str, Path]) -> None:
    mine = box["config"] / "Ultralytics/settings.json"
    before = mine.read_bytes()
    env = {"YOLO_CONFIG_DIR": str(box["config"])}
    path = [str(box["user"]), str(box["image"])]
    line = other_settings.prepare(env, path, image_site=str(box["image"]))
    folder = box["config"] / "Ultralytics-schema-0.0.6"
    theirs = folder / "Ultralytics/settings.json"
    assert env["YOLO_CONFIG_DIR"] == str(folder)
    assert line.startswith(
        f"INFO settings: Ultralytics 8.4.6 ({box['user']}/ultralytics) reads settings schema 0.0.6"
    )
    assert f"it uses {theirs}, seeded from yours" in line and str(mine) in line
    assert json.loads(theirs.read_text()) == {
        **IMAGE_SETTINGS,
        "settings_version": "0.0.6",
        "hub": True,
        "neptune": True,
    }
    assert os.readlink(folder / "Ultralytics/Arial.ttf") == "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    assert mine.read_bytes() == before

    # Again: nothing to say, the same folder; a child process inherits it and keeps it.
    assert other_settings.prepare(env, path, image_site=str(box["image"])) == ""
    assert env["YOLO_CONFIG_DIR"] == str(folder)

    # That Ultralytics changes its own file; then the user changes theirs (with the image's): the
    # next import seeds again from the user's, keeping what only that schema has.
    theirs.write_text(json.dumps({**json.loads(theirs.read_text()), "hub": False, "sync": True}))
    os.utime(theirs, (1, 1))
    mine.write_text(json.dumps({**IMAGE_SETTINGS, "runs_dir": "/workspace/later"}))
    assert other_settings.prepare(env, path, image_site=str(box["image"])).startswith("INFO settings:")
    seeded = json.loads(theirs.read_text())
    assert (seeded["runs_dir"], seeded["hub"], seeded["sync"]) == ("/workspace/later", False, False)


def test_the_images_ultralytics_and_one_of_its_schema_use_the_users_file(box: dict[str, Path]) -> None:
    derived = str(box["config"] / "Ultralytics-schema-0.0.6")
    image_only = [str(box["image"])]
    env = {"YOLO_CONFIG_DIR": derived}  # inherited from a parent that imported the other one
    assert other_settings.prepare(env, image_only, image_site=str(box["image"])) == ""
    assert env["YOLO_CONFIG_DIR"] == str(box["config"])
    newer = box["config"].parent / "newer"
    ultralytics(newer, "0.0.8")  # another release, the image's schema: it takes the file as it is
    env = {"YOLO_CONFIG_DIR": str(box["config"])}
    assert other_settings.prepare(env, [str(newer)], image_site=str(box["image"])) == ""
    assert env == {"YOLO_CONFIG_DIR": str(box["config"])}
    assert not Path(derived).exists()
    # A package of that name without Ultralytics' utils: not an Ultralytics, nothing to keep apart.
    (box["config"].parent / "odd" / "ultralytics").mkdir(parents=True)
    (box["config"].parent / "odd" / "ultralytics" / "__init__.py").write_text("")
    assert (
        other_settings.prepare(env, [str(box["config"].parent / "odd")], image_site=str(box["image"])) == ""
    )
    assert env == {"YOLO_CONFIG_DIR": str(box["config"])}


def test_a_folder_it_cannot_write_is_one_warning_and_the_users_setting_stays(box: dict[str, Path]) -> None:
    (box["config"] / "Ultralytics-schema-0.0.6").write_text("a file where the folder would go")
    env = {"YOLO_CONFIG_DIR": str(box["config"])}
    line = other_settings.prepare(env, [str(box["user"])], image_site=str(box["image"]))
    assert line.startswith("WARNING settings: Ultralytics 8.4.6") and "cannot have its own" in line
    assert env["YOLO_CONFIG_DIR"] == str(box["config"])


def test_a_key_without_a_value_is_left_out_for_that_ultralytics_to_reset_its_own_file() -> None:
    computed = other_settings._NO_DEFAULT  # a default only that Ultralytics computes (a path)
    schema = other_settings.Schema(
        "0.0.9", {"settings_version": (str, "0.0.9"), "weights_dir": (str, computed)}
    )
    seeded = other_settings.translate({"settings_version": "0.0.8"}, schema, {})
    assert seeded == {"settings_version": "0.0.9"}
    assert other_settings.translate({"a": 1}, None, {}) == {"a": 1}  # no schema read: the file as it is


def test_the_guard_is_for_users_only_and_installs_once() -> None:
    finders: list[object] = []
    import_guard.install(finders, euid=0)
    assert finders == []
    import_guard.install(finders, euid=1000)
    import_guard.install(finders, euid=1000)
    assert len(finders) == 1 and isinstance(finders[0], import_guard.Guard)


def test_a_real_import_of_another_ultralytics_sees_its_own_folder(box: dict[str, Path]) -> None:
    """What docker/yolo-rig.pth does at a start of the image's Python, then `import ultralytics`."""
    mine = box["config"] / "Ultralytics/settings.json"
    before = mine.read_bytes()
    code = (
        f"import sys; sys.path[:0] = [{str(REPO / 'entrypoint')!r}, {str(box['user'])!r}]; "
        "import rig.yolo.import_guard as g; g.install(euid=1000); "  # as yolo, whoever runs the tests
        "import ultralytics; del sys.modules['ultralytics']; import ultralytics"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code],
        env={
            "YOLO_CONFIG_DIR": str(box["config"]),
            "HOME": str(box["config"].parent),
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"CONFIG {box['config']}/Ultralytics-schema-0.0.6\n" in result.stdout, result.stdout
    assert result.stderr.startswith("INFO settings: Ultralytics 8.4.6"), result.stderr
    assert result.stderr.count("INFO settings:") == 1, result.stderr  # the first import only
    assert mine.read_bytes() == before
