"""Host unit tests see no Ultralytics settings of the machine they run on (~/.config/Ultralytics)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_host_ultralytics_settings(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path_factory.mktemp("yolo-config")))
