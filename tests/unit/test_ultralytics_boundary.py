"""Ultralytics behind one door: rig reaches it only through rig.yolo.ultra, only by names
rig.yolo.contract lists.

- Every module of the package is parsed (not imported): `import ultralytics...`, `from ultralytics...
  import` and a call naming it as a module to import (`importlib.import_module("ultralytics.cfg")`,
  `__import__`, `find_spec`) anywhere but rig/yolo/ultra.py fail the test; so does a call of the
  door's private `_module`/`_optional` from outside it.
- mypy (with tools/mypy_ultralytics.py) type-checks rig's code against the contract: an attribute,
  method, key or module name the contract does not list, reached directly or by getattr/hasattr, is
  an error; the package passes, a planted reach of each kind fails.
- An Ultralytics object passed around untyped would escape that check: a parameter named for one
  (trainer, validator, dataset...) typed Any or not at all fails the test.
- Every swap of a module global (`ultra.swapped`) names only what the contract lists as swapped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import rig

PACKAGE = Path(rig.__file__).parent
REPO = PACKAGE.parents[1]
DOOR = PACKAGE / "yolo" / "ultra.py"
CONTRACT = PACKAGE / "yolo" / "contract.py"
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


def _modules() -> list[Path]:
    found = sorted(PACKAGE.rglob("*.py"))
    assert len(found) > 100  # the whole package is walked
    return found


def test_only_the_door_imports_ultralytics() -> None:
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{line}"
        for p in _modules()
        if p != DOOR
        for line in ultralytics_imports(p.read_text(encoding="utf-8"))
    ]
    assert found == [], "reach Ultralytics through rig.yolo.ultra's typed accessors, not here"


def test_nothing_outside_the_door_calls_its_private_import() -> None:
    found = [
        f"{p.relative_to(PACKAGE.parent)}:{node.lineno}"
        for p in _modules()
        if p != DOOR
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in {"_module", "_optional"}
    ]
    assert found == []


# Parameters that hold an Ultralytics object wherever rig names them so.
ULTRALYTICS_OBJECTS = frozenset(
    {
        "trainer",
        "validator",
        "dataset",
        "ds",
        "loader",
        "train_loader",
        "ckpt",
        "labels",
        "cfg",
        "model_or_trainer",
    }
)


def untyped_objects(source: str) -> list[str]:
    """Parameters named for an Ultralytics object, typed Any, object or not at all."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in ULTRALYTICS_OBJECTS:
                    typed = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    if typed in {"", "Any", "object"}:
                        found.append(f"{node.name}({arg.arg}: {typed or 'untyped'}):{node.lineno}")
    return found


def test_every_ultralytics_object_rig_takes_is_typed_by_the_contract() -> None:
    found = [
        f"{p.relative_to(PACKAGE.parent)}: {hit}"
        for p in _modules()
        if p != CONTRACT
        for hit in untyped_objects(p.read_text(encoding="utf-8"))
    ]
    assert found == [], "type it with rig.yolo.contract's Protocol, so mypy checks what rig reaches of it"


def test_an_untyped_ultralytics_object_is_seen() -> None:
    source = "def f(trainer, ds: Any, cfg: contract.Cfg, model: Any, *, loader: object) -> None: ..."
    assert [h.split(":")[0] for h in untyped_objects(source)] == ["f(trainer", "f(ds", "f(loader"]


def _swaps(source: str) -> list[tuple[str, list[str], int]]:
    """(the contract's Protocol, the names swapped, line) of each `ultra.swapped(contract.X, ...)`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "swapped"
        ):
            proto = node.args[0]
            assert isinstance(proto, ast.Attribute) and ast.unparse(proto.value) == "contract", ast.unparse(
                node
            )
            found.append((proto.attr, [k.arg for k in node.keywords if k.arg], node.lineno))
    return found


def test_every_swap_names_only_what_the_contract_lists_as_swapped() -> None:
    from rig.yolo import contract, ultra

    swaps = [(p, *s) for p in _modules() for s in _swaps(p.read_text(encoding="utf-8"))]
    assert len(swaps) >= 7  # the trainer's, the loader's, the datasets', the data screen's, CPU ranks'
    for path, proto, names, line in swaps:
        unlisted = set(names) - ultra.swappable(getattr(contract, proto))
        assert not unlisted, f"{path.relative_to(PACKAGE.parent)}:{line}: {sorted(unlisted)}"


def _mypy(monkeypatch: pytest.MonkeyPatch, *targets: str, cache: Path | None = None) -> tuple[int, str]:
    from mypy import api

    monkeypatch.setenv("MYPY_CONFIG_FILE_DIR", str(REPO))  # mypy sets it: put back after the test
    args = ["--config-file", str(REPO / "pyproject.toml"), *(["--cache-dir", str(cache)] if cache else [])]
    out, err, code = api.run([*args, *targets])
    return code, out + err


def test_rigs_code_reaches_only_what_the_contract_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """mypy over the package, as `make lint` runs it: every reach into Ultralytics is listed."""
    code, out = _mypy(monkeypatch, str(PACKAGE))
    assert code == 0, out


def test_a_reach_the_contract_does_not_list_fails_the_type_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from rig.yolo import contract, ultra\n\n\n"
        "def reach(t: contract.Trainer, c: contract.Checkpoint) -> None:\n"
        '    print(t.epoch, getattr(t, "stopper", None), c.get("epoch"))\n'
        "    print(ultra.data_build().InfiniteDataLoader)\n"
        "    print(t.not_listed_attribute)\n"
        '    print(getattr(t, "not_listed_either", None))\n'
        "    print(ultra.data_build().NotListed)\n"
        '    print(c["not_a_key"])\n'
    )
    monkeypatch.setenv("MYPYPATH", str(PACKAGE.parent))
    code, out = _mypy(monkeypatch, str(planted), cache=tmp_path / "cache")
    errors = [line.split(": error: ")[1] for line in out.splitlines() if ": error: " in line]
    assert code == 1 and len(errors) == 4, out
    assert '"Trainer" has no attribute "not_listed_attribute"' in errors[0]
    assert '"not_listed_either" is not in rig.yolo.contract.Trainer' in errors[1]
    assert '"DataBuild" has no attribute "NotListed"' in errors[2]
    assert 'TypedDict "Checkpoint" has no key "not_a_key"' in errors[3]


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
