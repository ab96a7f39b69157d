"""tools/gpu_wheels.py: the wheels a lent GPU box lacks, derived from what the check's code imports and
uv.lock's versions. Every third-party module rig's commands and the check import is on the box's list
or in that set; a module neither on the box nor in the lock stops the derivation naming the file."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "tools"))
import gpu_wheels  # tools/ is no package of the image

SHARED = REPO.parent / "shared" / "gpu-box-packages.txt"  # the box's reading, beside the checkout


def test_every_module_the_check_reaches_is_on_the_box_or_carried() -> None:
    box = gpu_wheels.box_packages()
    carried = {p.name for p in gpu_wheels.derive()}
    modules = gpu_wheels.third_party()
    assert {"hostlist", "ultralytics", "torch", "cv2", "yaml"} <= set(modules), modules
    missing = {m: where for m, where in modules.items() if gpu_wheels.distribution(m) not in box | carried}
    assert not missing, f"imported, neither on the GPU box nor carried: {missing}"


def test_the_set_is_what_the_box_lacks_at_the_locks_versions() -> None:
    packages = {p.name: p.version for p in gpu_wheels.derive()}
    lock = {p["name"]: p["version"] for p in tomllib.loads((REPO / "uv.lock").read_text())["package"]}
    # rig.launch.nodes reads Slurm's node lists with hostlist; Ultralytics brings polars and thop.
    assert {"python-hostlist", "ultralytics-opencv-headless", "polars", "polars-runtime-32"} <= set(packages)
    assert not {"torch", "numpy", "opencv-python-headless", "pyyaml"} & set(packages)  # the box has them
    assert all(lock[name] == version for name, version in packages.items())


def test_a_module_neither_on_the_box_nor_locked_is_named_with_its_file(tmp_path: Path) -> None:
    rig = tmp_path / "entrypoint" / "rig"
    rig.mkdir(parents=True)
    (rig / "__init__.py").write_text("")
    (rig / "__main__.py").write_text("from rig import deep\n")
    (rig / "deep.py").write_text(
        "import importlib\nNAME = 'frobnicate'\n\ndef f():\n    importlib.import_module(NAME)\n"
    )
    found = gpu_wheels.third_party(tmp_path, ["entrypoint/rig/__main__.py"])
    assert found == {"frobnicate": "entrypoint/rig/deep.py"}
    lock = gpu_wheels.read_lock(REPO / "uv.lock")
    with pytest.raises(
        gpu_wheels.WheelError, match=r"entrypoint/rig/deep.py imports frobnicate, which is neither"
    ):
        gpu_wheels.lacking(found, lock, gpu_wheels.box_packages())
    # The same import of a locked distribution the box lacks: carried, with what it needs.
    carried = gpu_wheels.lacking({"ultralytics": "x.py"}, lock, gpu_wheels.box_packages())
    assert {p.name for p in carried} >= {"ultralytics-opencv-headless", "ultralytics-thop", "polars"}


def test_dynamic_imports_are_read_through_module_strings() -> None:
    source = (
        'import importlib\nPACKAGE = "ultralytics"\n\n'
        'def m(n):\n    return importlib.import_module(f"{PACKAGE}.{n}" if n else PACKAGE)\n'
    )
    assert "ultralytics" in gpu_wheels.imports_of(source)
    assert gpu_wheels.imports_of("x = __import__('numpy')\n") == {"numpy"}


@pytest.mark.skipif(not SHARED.is_file(), reason="no ../shared/gpu-box-packages.txt beside this checkout")
def test_the_committed_box_list_is_the_boxs_reading() -> None:
    assert gpu_wheels.BOX_LIST.read_text() == SHARED.read_text(), f"copy {SHARED} to {gpu_wheels.BOX_LIST}"
