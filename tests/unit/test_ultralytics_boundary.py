"""Ultralytics behind one boundary: only modules under rig/yolo/ import it (issue 23).

Every module of the package is parsed (not imported): `import ultralytics...`, `from ultralytics...
import` and a call naming it as a module to import (`importlib.import_module("ultralytics.cfg")`,
`__import__`, `find_spec`) outside rig/yolo fail the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rig

PACKAGE = Path(rig.__file__).parent
BOUNDARY = PACKAGE / "yolo"
_IMPORTERS = frozenset({"import_module", "__import__", "find_spec"})


def _is_ultralytics(name: str) -> bool:
    return name == "ultralytics" or name.startswith("ultralytics.")


def ultralytics_imports(source: str) -> list[int]:
    """The lines of a module's source that import Ultralytics."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0] if node.args else None
            is_text = isinstance(first, ast.Constant) and isinstance(first.value, str)
            names = [first.value] if called in _IMPORTERS and is_text else []  # type: ignore[union-attr]
        else:
            continue
        if any(_is_ultralytics(name) for name in names):
            lines.append(node.lineno)
    return lines


def test_only_rig_yolo_imports_ultralytics() -> None:
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if BOUNDARY not in p.parents]
    assert len(outside) > 50  # the whole package was walked
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{line}"
        for p in outside
        for line in ultralytics_imports(p.read_text(encoding="utf-8"))
    ]
    assert found == [], "import Ultralytics through rig.yolo (rig/yolo/ultra.py), not here"


def test_every_way_of_importing_is_seen() -> None:
    source = """
import ultralytics
import ultralytics.cfg as cfg
from ultralytics import YOLO
from ultralytics.data.utils import check_det_dataset
importlib.import_module("ultralytics.engine.trainer")
import_module("ultralytics")
__import__("ultralytics.utils")
importlib.util.find_spec("ultralytics")
"""
    assert ultralytics_imports(source) == [2, 3, 4, 5, 6, 7, 8, 9]


def test_a_name_that_is_not_an_import_is_allowed() -> None:
    source = """
import ultralytics_extra
from . import ultralytics
version = metadata.version("ultralytics-opencv-headless")
print("ultralytics")
"""
    assert ultralytics_imports(source) == []
