"""Ultralytics' own tests inside the image, as yolo, against a stock environment of the same versions.

A selection of the pinned sdist's tests (tests/scripts/ultralytics_peer.py) runs twice, offline,
in containers from the image under test:
- as the image is: user yolo through rig's entrypoint, its settings, its default.yaml, its
  site-packages;
- stock: the same interpreter and locked packages, but the pinned Ultralytics wheel unpacked ahead
  of the image's copy (its own default.yaml), none of rig's variables (`env -i`), Ultralytics'
  own settings in a fresh home.
Every selected test must have the same outcome in both. The sdist, the wheel and pytest come from
PyPI by uv.lock's hashes, downloaded once into pytest's cache.
"""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SCRIPTS, locked_files

pytestmark = [pytest.mark.image, pytest.mark.slow]

ULTRALYTICS = "ultralytics-opencv-headless"
RUN = "python /tests/ultralytics_peer.py /peer/sdist/tests"
# Stock: nothing of the image's environment but the interpreter's path; Ultralytics' own settings.
STOCK = (
    "mkdir -p /tmp/home /tmp/work && cp -r /peer/stock /tmp/stock && cd /tmp/work && env -i "
    f"PATH=/opt/venv/bin:/usr/bin:/bin HOME=/tmp/home LANG=C.UTF-8 PYTHONPATH=/tmp/stock:/peer/pytest {RUN}"
)
IMAGE_SIDE = f"mkdir -p /tmp/work && cd /tmp/work && PYTHONPATH=/peer/pytest {RUN}"


def _unzip(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into)


@pytest.fixture(scope="session")
def peer_files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache = Path(store.mkdir("locked-files")) if store else tmp_path_factory.mktemp("locked-files")
    stage = tmp_path_factory.mktemp("peer")
    with tarfile.open(locked_files.fetch(locked_files.sdist(ULTRALYTICS), cache)) as tar:
        tests = [m for m in tar.getmembers() if m.name.split("/")[1:2] == ["tests"]]
        tar.extractall(stage / "sdist-raw", members=tests, filter="data")
    (stage / "sdist").mkdir()
    next((stage / "sdist-raw").iterdir()).joinpath("tests").rename(stage / "sdist/tests")
    _unzip(locked_files.fetch(locked_files.pure_wheel(ULTRALYTICS), cache), stage / "stock")
    for name in ["pytest", *locked_files.dependencies("pytest")]:
        _unzip(locked_files.fetch(locked_files.pure_wheel(name), cache), stage / "pytest")
    for path in [stage, *stage.rglob("*")]:  # readable by the containers' yolo
        path.chmod(0o755 if path.is_dir() else 0o644)
    return stage


def outcomes(containers: Any, peer: Path, script: str, **kwargs: Any) -> dict[str, str]:
    rc, logs = containers.oneshot(
        ["bash", "-c", script],
        timeout=600,
        network_mode="none",
        shm_size="1g",
        volumes={str(peer): {"bind": "/peer", "mode": "ro"}, str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
        **kwargs,
    )
    line = next((x for x in logs.splitlines() if x.startswith("PEER-OUTCOMES ")), None)
    assert rc == 0 and line is not None, logs[-5000:]
    result: dict[str, str] = json.loads(line.removeprefix("PEER-OUTCOMES "))
    print(script.split(" && ")[-1][:60], json.dumps(result, indent=1))  # shown by -rA or -s
    return result


def test_ultralytics_own_tests_pass_in_the_image_as_in_a_stock_environment(
    containers: Any, peer_files: Path
) -> None:
    # Not through rig's entrypoint: no settings seeded, no GPU variables; plain user yolo.
    stock = outcomes(containers, peer_files, STOCK, user="yolo", entrypoint=["/usr/bin/env"])
    image = outcomes(containers, peer_files, IMAGE_SIDE)
    assert len(stock) >= 8 and sum(v == "passed" for v in stock.values()) >= 7, stock  # a real selection
    keys = stock.keys() | image.keys()
    differ = {k: (stock.get(k), image.get(k)) for k in keys if stock.get(k) != image.get(k)}
    assert not differ, f"(stock, image) outcomes differ: {differ}"
