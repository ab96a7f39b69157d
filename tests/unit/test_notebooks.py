"""The notebooks: kept in git without outputs, baked into the image, seeded, and run top to bottom."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import NOTEBOOKS

NAMES = ("quickstart", "data_exploration", "augment_debug")


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
