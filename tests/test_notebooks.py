"""The notebooks: kept in git without outputs, baked into the image, seeded, and run top to bottom."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ("quickstart", "data_exploration", "augment_debug")

# Executes one seeded notebook with nbclient, as Jupyter would, from its folder in the workspace.
RUNNER = """
import sys, time, nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nbformat.validate(nb)
start = time.monotonic()
NotebookClient(nb, timeout=240, kernel_name="python3",
               resources={"metadata": {"path": "/workspace/notebooks"}}).execute()
print(f"EXECUTED {path} in {time.monotonic() - start:.0f} s")
"""


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    return data


def test_the_notebooks_are_the_ones_we_ship() -> None:
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_kept_without_outputs(name: str) -> None:
    nb = _load(name)
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "a notebook without code"
    for i, cell in enumerate(code):
        assert cell["outputs"] == [], f"{name}: code cell {i} has outputs; clear them before committing"
        assert cell["execution_count"] is None, f"{name}: code cell {i} has an execution count"
    assert "widgets" not in nb["metadata"], f"{name}: widget state stored in the notebook metadata"


@pytest.mark.parametrize("name", NAMES)
def test_first_code_cell_makes_the_demo_data_when_missing(name: str) -> None:
    first = "".join(next(c for c in _load(name)["cells"] if c["cell_type"] == "code")["source"])
    assert "make_demo_dataset(" in first
    assert "/datasets/demo" in first


@pytest.mark.image
@pytest.mark.parametrize("name", NAMES)
def test_runs_top_to_bottom_in_the_image(containers: Any, name: str) -> None:
    # No network: a notebook that tries to download anything fails here. /datasets starts empty,
    # as a fresh volume does, so the first cell has to make the demo data.
    box = containers.run(
        ["sleep", "infinity"],
        network_mode="none",
        shm_size="1g",
        mem_limit="6g",
    )
    rc, out = containers.exec(box, f"sha256sum /opt/rig/notebooks/{name}.ipynb", timeout=30)
    assert rc == 0, out
    baked = out.split()[0]
    ours = hashlib.sha256((NOTEBOOKS / f"{name}.ipynb").read_bytes()).hexdigest()
    assert baked == ours, f"the image holds another {name}.ipynb; rebuild it with `make build`"

    seed = "from rig.workstation.workspace import seed_notebooks; print(seed_notebooks())"
    rc, out = containers.exec(box, ["python", "-c", seed], timeout=60, user="yolo")
    assert rc == 0, out
    rc, out = containers.exec(
        box,
        ["python", "-c", RUNNER, f"/workspace/notebooks/{name}.ipynb"],
        timeout=300,
        user="yolo",
        workdir="/workspace/notebooks",
    )
    assert rc == 0, out[-6000:]
    assert f"EXECUTED /workspace/notebooks/{name}.ipynb" in out
