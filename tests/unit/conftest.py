"""Host unit tests see no Ultralytics settings of the machine they run on (~/.config/Ultralytics).

Where Ultralytics is not installed (the host's venv has no torch), rig's check of it at start
(rig.yolo.ultracheck) reads the image's Ultralytics: the locked wheel's source, unpacked on the host
(tests/helpers/ultralytics_releases.py), checked once per test process, as `rig train` checks the
installed package."""

from __future__ import annotations

import functools

import pytest
from rig.yolo import contractcheck, ultra, ultracheck

from tools import ultralytics_releases


@pytest.fixture(autouse=True)
def _no_host_ultralytics_settings(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path_factory.mktemp("yolo-config")))


@functools.cache
def _locked_report() -> contractcheck.Report:
    return contractcheck.check(ultralytics_releases.source())


@pytest.fixture(autouse=True)
def _ultralytics_as_the_image_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    if not ultra.installed():
        monkeypatch.setattr(ultracheck, "installed", _locked_report)
