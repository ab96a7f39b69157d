"""rig.versions: the installed versions, read from the .dist-info folders' names on a path."""

from __future__ import annotations

from pathlib import Path

from rig import versions


def test_versions_come_from_dist_info_names_first_on_the_path_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, names in (
        (first, ["torch-2.3.1+cu121.dist-info", "nvidia_cudnn_cu12-8.9.2.26.dist-info", "torch"]),
        (second, ["torch-9.9.dist-info", "Ultralytics_OpenCV_Headless-8.4.190.dist-info", "x.egg-info"]),
    ):
        for name in names:
            (folder / name).mkdir(parents=True)
    found = versions.dist_info_versions([str(first), str(tmp_path / "missing"), str(second)])
    assert found == {
        "torch": "2.3.1+cu121",
        "nvidia_cudnn_cu12": "8.9.2.26",
        "ultralytics_opencv_headless": "8.4.190",
    }


def test_describe_names_each_part_of_the_stack() -> None:
    line = versions.describe()
    assert line.startswith(f"yolo-rig {versions.__version__} (stack ")
    for part in ("python ", "torch ", "CUDA ", "cuDNN ", "ultralytics ", "opencv "):
        assert part in line
