"""`rig export`: bad input on the host, and the real export check on a one-epoch model in the image."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.yolo.export import find_images

from tests.helpers import ENTRYPOINT


def _run(*argv: str) -> tuple[int, list[str]]:
    """`rig export ...` as a user runs it: its exit code and its stderr lines."""
    env = {**os.environ, "PYTHONPATH": str(ENTRYPOINT)}
    proc = subprocess.run(
        [sys.executable, "-m", "rig", "export", *argv], capture_output=True, text=True, env=env, timeout=60
    )
    return proc.returncode, proc.stderr.strip().splitlines()


def test_missing_weights_is_one_line(tmp_path: Path) -> None:
    code, lines = _run(str(tmp_path / "best.pt"))
    assert code == 1
    assert len(lines) == 1
    assert lines[0].startswith("ERROR ") and "no weights at" in lines[0]


def test_not_a_pt_file(tmp_path: Path) -> None:
    weights = tmp_path / "best.onnx"
    weights.write_bytes(b"x")
    code, lines = _run(str(weights))
    assert code == 1 and len(lines) == 1 and "not a PyTorch .pt file" in lines[0]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--format", "engine", "--format engine: only onnx"), ("--rtol", "0", "--rtol 0.0: must be positive"),
     ("--max-images", "0", "--max-images 0: must be at least 1")],
)  # fmt: skip
def test_bad_options(flag: str, value: str, message: str) -> None:
    code, lines = _run("best.pt", flag, value)
    assert code == 1 and len(lines) == 1 and message in lines[0]


def test_find_images(tmp_path: Path) -> None:
    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    for name in ("b.jpg", "a.PNG", "notes.txt", "sub/c.jpeg"):
        (folder / name).write_bytes(b"")
    assert [p.name for p in find_images([folder], limit=10)] == ["a.PNG", "b.jpg", "c.jpeg"]
    assert len(find_images([folder], limit=2)) == 2
    single = folder / "b.jpg"
    assert find_images([single], limit=10) == [single]
    # Nothing given: the first fallback folder that has images.
    assert find_images([], 10, fallback=(tmp_path / "none", folder))[0].name == "a.PNG"
    assert find_images([], 10, fallback=(tmp_path / "none",)) == []
    with pytest.raises(RigError, match=r"^--images: no such file"):
        find_images([tmp_path / "absent"], limit=10)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RigError, match=r"^--images: no images \("):
        find_images([empty], limit=10)
