"""Run a selection of Ultralytics' own tests offline, with stand-ins, and print their outcomes.

usage: python ultralytics_peer.py SDIST_TESTS   (in an empty, writable working directory)

Run once inside the image as it is, once in a stock environment of the same versions; the image
test compares the two. The stand-ins are made by the Ultralytics under test, where its settings
say: random weights built from its own yamls (yolo26n.pt, and the copy the tests keep under
"path with spaces"), and coco8 as a tiny synthetic dataset with COCO's 80 class names (the
packaged coco8.yaml). Prints one line `PEER-OUTCOMES {nodeid: outcome}`, the weights folder
written as WEIGHTS so both environments' ids compare.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
from typing import Any

SELECTION = (
    "tests/test_python.py::test_model_forward[[]yolo26n.yaml[]]",
    "tests/test_python.py::test_predict_img[[]yolo26n.pt[]]",
    "tests/test_python.py::test_predict_txt",
    "tests/test_python.py::test_val[[]detect-*",
    "tests/test_python.py::test_workflow",  # train, val, predict, export: runs under pytest
    "tests/test_python.py::test_track_second_association_indices",  # tracking: lap
    "tests/test_python.py::test_cfg_init",
    "tests/test_python.py::test_utils_ops",
)


def make_standins() -> None:
    import cv2
    import numpy as np
    from ultralytics import YOLO
    from ultralytics.utils import DATASETS_DIR, WEIGHTS_DIR

    model = YOLO("yolo26n.yaml")
    for path in (WEIGHTS_DIR / "yolo26n.pt", WEIGHTS_DIR / "path with spaces" / "yolo26n.pt"):
        path.parent.mkdir(parents=True, exist_ok=True)
        model.save(path)
    rng = np.random.default_rng(0)
    root = DATASETS_DIR / "coco8"
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            image = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
            cv2.imwrite(str(root / "images" / split / f"{i}.jpg"), image)
            boxes = [f"{rng.integers(0, 80)} 0.5 0.5 {rng.uniform(0.1, 0.8):.3f} 0.4" for _ in range(2)]
            (root / "labels" / split / f"{i}.txt").write_text("\n".join(boxes) + "\n")


class Outcomes:
    """A pytest plugin: keeps the selection, records one outcome per test."""

    def __init__(self, weights_dir: str) -> None:
        self.weights_dir = weights_dir
        self.outcomes: dict[str, str] = {}

    def _id(self, nodeid: str) -> str:
        return nodeid.replace(self.weights_dir, "WEIGHTS")

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        keep = [i for i in items if any(fnmatch.fnmatchcase(self._id(i.nodeid), s) for s in SELECTION)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid = self._id(report.nodeid)
        if report.when == "call" or report.outcome != "passed":
            previous = self.outcomes.get(nodeid, "passed")
            self.outcomes[nodeid] = report.outcome if previous == "passed" else previous


def main(sdist_tests: str) -> int:
    # Before Ultralytics: it decides once, at import, whether pytest runs it (TESTS_RUNNING).
    import pytest

    shutil.copytree(sdist_tests, "tests")
    sys.path.insert(0, os.getcwd())
    make_standins()
    from ultralytics.utils import TESTS_RUNNING, WEIGHTS_DIR

    assert TESTS_RUNNING, "Ultralytics does not see pytest: its runs would not go where they do in tests"

    plugin = Outcomes(str(WEIGHTS_DIR))
    code = pytest.main(["-p", "no:cacheprovider", "-q", "-rfE", "tests/test_python.py"], plugins=[plugin])
    print("PEER-OUTCOMES " + json.dumps(plugin.outcomes, sort_keys=True), flush=True)
    return int(code) if code not in (0, 1) else 0  # failures are outcomes to compare, not errors


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
