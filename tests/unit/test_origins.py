"""rig.origins: which Ultralytics a session imports, from where, installed by which distribution,
found on fake site-packages trees as Python's path finder finds it (nothing imported)."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path

import pytest
from rig import origins, versions

IMAGE_SITE = "/opt/venv/lib/python3.11/site-packages"
USER_SITE = "/home/yolo/.local/lib/python3.11/site-packages"


def install(site: Path, dist: str, version: str, *, top_level: bool = True, init: str = "") -> Path:
    """site/ultralytics and the .dist-info folder `dist` would leave beside it."""
    package = site / "ultralytics"
    package.mkdir(parents=True, exist_ok=True)
    text = init or f'__version__ = "{version}"\n'
    (package / "__init__.py").write_text(text)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    if top_level:
        (info / "top_level.txt").write_text("ultralytics\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(
        f"ultralytics/__init__.py,sha256={digest},{len(text)}\n{info.name}/RECORD,,\n"
    )
    return package


def test_a_users_ultralytics_on_pythonpath_wins_over_the_images(tmp_path: Path) -> None:
    install(tmp_path / IMAGE_SITE.lstrip("/"), "ultralytics-opencv-headless", "8.4.190")
    install(tmp_path / USER_SITE.lstrip("/"), "ultralytics", "8.4.100")
    # The image's other packages beside it: a distribution that does not claim the module.
    (tmp_path / IMAGE_SITE.lstrip("/") / "ultralytics_thop-2.2.3.dist-info").mkdir()
    environ = {"PYTHONPATH": f"/opt/rig/python:{USER_SITE}"}
    path = ["", "/usr/lib/python311.zip", IMAGE_SITE]
    session = origins.find("ultralytics", origins.session_path(environ, path, euid=1000), str(tmp_path))
    image = origins.find("ultralytics", origins.image_path(environ, path), str(tmp_path))
    assert session == origins.Origin("ultralytics", f"{USER_SITE}/ultralytics", "ultralytics", "8.4.100")
    assert image == origins.Origin(
        "ultralytics", f"{IMAGE_SITE}/ultralytics", "ultralytics-opencv-headless", "8.4.190"
    )
    assert image.describe() == f"ultralytics 8.4.190 ({IMAGE_SITE}/ultralytics, ultralytics-opencv-headless)"
    assert origins.find("ultralytics", origins.session_path({}, path, euid=1000), str(tmp_path)) == image
    # Root's sessions import no user's folder, and root's rig reads none.
    assert origins.find("ultralytics", origins.session_path(environ, path, euid=0), str(tmp_path)) == image


def test_the_session_path_is_pythonpath_then_the_interpreters_without_the_current_folder() -> None:
    environ = {"PYTHONPATH": "/a::rel:/b"}
    assert origins.session_path(environ, ["", "/b", "/c"], euid=1000) == ["/a", "/b", "/c"]
    assert origins.session_path(environ, ["", "/b", "/c"], euid=0) == ["/b", "/c"]
    assert origins.image_path(environ, ["", "/a", "/b", "/c"]) == ["/c"]


def test_the_distribution_is_the_one_whose_record_lists_the_module_as_it_is_on_disk(tmp_path: Path) -> None:
    # Both installed into one prefix, the headless one last: its files are those on disk.
    install(tmp_path, "ultralytics", "8.4.100", top_level=False, init='__version__ = "8.4.100"\n')
    install(tmp_path, "ultralytics-opencv-headless", "8.4.150", init='__version__ = "8.4.150"\n')
    found = origins.find("ultralytics", [str(tmp_path)])
    assert found is not None and (found.dist, found.version) == ("ultralytics-opencv-headless", "8.4.150")


def test_a_source_checkout_without_dist_info_reports_its_version_line(tmp_path: Path) -> None:
    package = tmp_path / "src" / "ultralytics"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('# Ultralytics\n\n__version__ = "8.4.191.dev0"\n')
    found = origins.find("ultralytics", [str(tmp_path / "src")])
    assert found == origins.Origin("ultralytics", str(package), "", "8.4.191.dev0")
    assert origins.find("ultralytics", [str(tmp_path / "nothing")]) is None


def test_rig_version_names_the_sessions_ultralytics_and_the_images_it_shadows(tmp_path: Path) -> None:
    install(tmp_path, "ultralytics", "8.4.100")
    found = versions.ultralytics({"PYTHONPATH": str(tmp_path)}, euid=1000)
    assert found["ultralytics"] == "8.4.100" and found["ultralytics_path"] == str(tmp_path / "ultralytics")
    assert found["image_ultralytics_path"] != found["ultralytics_path"]  # the host's, or none


def test_rig_version_says_which_ultralytics_and_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = install(tmp_path / "user", "ultralytics", "8.4.100")
    install(tmp_path / "image", "ultralytics-opencv-headless", "8.4.190")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "image")])
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "user"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a session of yolo's, whoever runs the tests
    assert versions.describe().endswith(
        f", ultralytics 8.4.100, opencv not installed (ultralytics from {package}, "
        f"not the image's 8.4.190 from {tmp_path}/image/ultralytics)"
    )
    monkeypatch.delenv("PYTHONPATH")
    line = versions.describe()
    assert line.endswith(
        f", ultralytics 8.4.190, opencv not installed (ultralytics from {tmp_path}/image/ultralytics)"
    )


def test_a_fifo_or_a_link_in_a_users_folder_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('__version__ = "leaked"\nultralytics/__init__.py,sha256=x,1\n')
    package = tmp_path / "site" / "ultralytics"
    package.mkdir(parents=True)
    (package / "__init__.py").symlink_to(secret)
    info = tmp_path / "site" / "ultralytics-8.4.100.dist-info"
    info.mkdir()
    os.mkfifo(info / "top_level.txt")  # whoever opened it to read would wait forever
    (info / "RECORD").symlink_to(secret)
    found = origins.find("ultralytics", [str(tmp_path / "site")])
    assert found == origins.Origin("ultralytics", str(package), "", "unknown")
