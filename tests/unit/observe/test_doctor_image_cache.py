"""`rig doctor --data`: the node image cache for the dataset, where it is, how big, how warm."""

from __future__ import annotations

from pathlib import Path

import pytest
from rig.observe import doctor, doctor_gather
from rig.observe.doctor import DatasetFacts, Facts, Status

GIB = 1 << 30


def facts(**cache: object) -> Facts:
    return Facts(dataset=DatasetFacts("d.yaml", path="/datasets/d.yaml", images=10, **cache))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cache", "status", "said"),
    [
        ({}, Status.SKIP, "no readable dataset"),
        ({"image_cache_error": "node image cache not looked up (no cv2)"}, Status.SKIP, "no cv2"),
        ({"image_cache_path": "/cache/images/k.img"}, Status.PASS, "not built yet"),
        (
            {
                "image_cache_path": "/cache/images/k.img",
                "image_cache_bytes": 2 * GIB,
                "image_cache_resident": 2 * GIB,
            },
            Status.PASS,
            "2.0 GiB at /cache/images/k.img, warm: 100% in the page cache",
        ),
        (
            {
                "image_cache_path": "/cache/images/k.img",
                "image_cache_bytes": 2 * GIB,
                "image_cache_resident": GIB,
            },
            Status.PASS,
            "partly warm: 50%",
        ),
        (
            {"image_cache_path": "/c/k.img", "image_cache_bytes": GIB, "image_cache_resident": 0},
            Status.PASS,
            "cold",
        ),
    ],
)
def test_image_cache_check(cache: dict[str, object], status: Status, said: str) -> None:
    check = doctor.check_image_cache(facts(**cache))
    assert check.status is status
    assert said in check.detail, check.detail


def test_no_dataset_skips() -> None:
    assert doctor.check_image_cache(Facts()).status is Status.SKIP


def test_gather_without_opencv_says_so(tmp_path: Path) -> None:
    # The host has no OpenCV: the lookup is reported as not done, never a crash.
    got = doctor_gather.image_cache_facts([tmp_path / "a.jpg"], 640)
    assert got.get("image_cache_error") or got.get("image_cache_path")
