"""Where the image writes at run time, moved to the user's own places where it is read-only."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
import rig
from rig import places
from rig.yolo import settings

UID = os.geteuid()


@pytest.fixture
def image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The image's environment with its folders under tmp_path/ro: the baked settings (runs_dir
    ro/workspace/runs), the user's seeded copy, /cache; a TMPDIR of the job's."""
    ro = tmp_path / "ro"
    baked = ro / "opt/rig/ultralytics/Ultralytics"
    baked.mkdir(parents=True)
    values = {
        "settings_version": "0.0.8",
        "datasets_dir": "/datasets",
        "runs_dir": str(ro / "workspace/runs"),
    }
    values["sync"] = False
    (baked / "settings.json").write_text(json.dumps(values))
    (baked / "Arial.ttf").symlink_to("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    monkeypatch.setattr(settings, "BAKED_CONFIG_DIR", baked.parent)
    config = ro / "workspace/.config"
    (config / "Ultralytics").mkdir(parents=True)
    (config / "Ultralytics/settings.json").write_text(json.dumps(values))
    (tmp_path / "job-tmp").mkdir()
    return {
        "YOLO_CONFIG_DIR": str(config),
        "RIG_CACHE_DIR": str(ro / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(ro / "cache/torch/inductor"),
        "TRITON_CACHE_DIR": str(ro / "cache/torch/triton"),
        "TMPDIR": str(tmp_path / "job-tmp"),
    }


def under(folder: Path):  # type: ignore[no-untyped-def]
    return lambda path: Path(path).is_relative_to(folder)


def test_on_a_read_only_image_everything_moves_and_the_runs_follow_the_working_folder(
    image: dict[str, str], tmp_path: Path
) -> None:
    base = tmp_path / "job-tmp/yolo-rig-4321"
    moves = places.decide(image, base, under(tmp_path / "ro"))
    assert moves.env == {
        "YOLO_CONFIG_DIR": f"{base}/config",
        "RIG_CACHE_DIR": f"{base}/cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{base}/cache/torch/inductor",
        "TRITON_CACHE_DIR": f"{base}/cache/torch/triton",
        "XDG_CACHE_HOME": f"{base}/cache/xdg",  # onnxruntime's device id, not in the host's home
        "MPLCONFIGDIR": f"{base}/cache/matplotlib",  # matplotlib's font list, likewise
    }
    assert moves.config_dir == base / "config" and moves.runs_dir == "runs"
    assert places.private_base(image, 4321) == base
    assert places.private_base({"SLURM_TMPDIR": "/local/job7", "TMPDIR": "/t"}, 1) == Path(
        "/local/job7/yolo-rig-1"
    )
    assert places.private_base({"TMPDIR": "relative"}, 1) == Path("/tmp/yolo-rig-1")


def test_a_bound_runs_folder_stays_and_a_writable_place_never_moves(
    image: dict[str, str], tmp_path: Path
) -> None:
    ro = tmp_path / "ro"
    base = tmp_path / "b"

    def bound(path: Path) -> bool:  # --bind DIR:/workspace/runs: writable, the rest read-only
        return Path(path).is_relative_to(ro) and not Path(path).is_relative_to(ro / "workspace/runs")

    moves = places.decide(image, base, bound)
    assert moves.runs_dir == str(ro / "workspace/runs") and "runs in" not in " ".join(moves.moved)
    # The user's own settings elsewhere, the caches bound: nothing moves, nothing is said.
    own = {**image, "YOLO_CONFIG_DIR": str(tmp_path / "mine")}
    assert places.decide(own, base, under(ro / "nothing")) == places.Moves()
    # What the user set for the libraries' caches is theirs.
    kept = places.decide({**image, "XDG_CACHE_HOME": "/scratch/u/.cache"}, base, under(ro))
    assert "XDG_CACHE_HOME" not in kept.env


def test_the_private_folder_is_made_seeded_and_said_once(
    image: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env, lines = places.prepared(image, UID, under(tmp_path / "ro"))
    base = tmp_path / f"job-tmp/yolo-rig-{UID}"
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    assert env["YOLO_CONFIG_DIR"] == f"{base}/config"
    seeded = base / "config/Ultralytics"
    assert json.loads((seeded / "settings.json").read_text())["runs_dir"] == "runs"
    assert os.readlink(seeded / "Arial.ttf").endswith("DejaVuSans.ttf")
    assert len(lines) == 1 and lines[0][0] == logging.INFO
    assert f"runs in ./runs of the folder you start in ({tmp_path}/runs now)" in lines[0][1]
    assert f"Ultralytics' settings in {base}/config" in lines[0][1] and "\n" not in lines[0][1]
    # The user's own change stays at the next start; runs_dir is set again, the only key touched.
    values = json.loads((seeded / "settings.json").read_text())
    (seeded / "settings.json").write_text(json.dumps({**values, "sync": True, "runs_dir": "/elsewhere"}))
    again, _ = places.prepared(image, UID, under(tmp_path / "ro"))
    assert again == env
    assert json.loads((seeded / "settings.json").read_text()) | {"runs_dir": "x"} == {
        **values,
        "sync": True,
        "runs_dir": "x",
    }
    assert json.loads((seeded / "settings.json").read_text())["runs_dir"] == "runs"


def test_a_private_folder_that_is_not_the_users_alone_is_never_used(
    image: dict[str, str], tmp_path: Path
) -> None:
    base = tmp_path / f"job-tmp/yolo-rig-{UID}"
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    base.symlink_to(elsewhere)  # another user got there first, in the shared /tmp
    env, lines = places.prepared(image, UID, under(tmp_path / "ro"))
    assert env == image and [level for level, _ in lines] == [logging.WARNING]
    assert "is a symbolic link" in lines[0][1] and "set TMPDIR" in lines[0][1]
    assert list(elsewhere.iterdir()) == []
    base.unlink()
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    env, lines = places.prepared(image, UID, under(tmp_path / "ro"))
    assert env == image and "can be written by anyone" in lines[0][1]


def test_a_command_drops_the_hosts_variables_and_moves_its_places_in_its_own_process(
    image: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in {**image, "APPTAINER_CONTAINER": "/x.sif", "PYTHONPATH": "/sw/lib"}.items():
        monkeypatch.setenv(name, value)
    for name in places.HOME_CACHES:  # set by the command: monkeypatch puts the environment back
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(rig, "USER_ENVIRON", dict(os.environ))
    monkeypatch.chdir(tmp_path)
    uid = 4321 if UID == 0 else UID  # as a user: root keeps the image's own (rig exec)
    base = tmp_path / f"job-tmp/yolo-rig-{uid}"
    base.mkdir(mode=0o700)
    os.chown(base, uid, uid)
    caplog.set_level(logging.INFO, "rig")
    places.prepare_process(uid, under(tmp_path / "ro"))
    for environ in (os.environ, rig.USER_ENVIRON):
        assert "PYTHONPATH" not in environ and environ["APPTAINER_CONTAINER"] == "/x.sif"
        assert environ["RIG_CACHE_DIR"] == f"{base}/cache" and environ["YOLO_CONFIG_DIR"] == f"{base}/config"
    levels = [r.levelname for r in caplog.records if r.name == "rig.places"]
    assert levels == ["WARNING", "INFO"], caplog.text
    # Prepared again (rig exec did it, then the command): nothing more to move, nothing said.
    caplog.clear()
    places.prepare_process(uid, under(tmp_path / "ro"))
    assert [r for r in caplog.records if r.name == "rig.places"] == []
