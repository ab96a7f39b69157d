"""The notebooks in the image: baked, seeded into the workspace, and run top to bottom offline."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.helpers import NOTEBOOKS, SCRIPTS

pytestmark = pytest.mark.image

NAMES = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))  # tests/unit/test_notebooks.py pins the list

# Executes one seeded notebook with nbclient, as Jupyter would, from its folder in the workspace.
RUNNER = (SCRIPTS / "run_notebook.py").read_text()


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
