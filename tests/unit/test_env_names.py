"""Each RIG_* variable is spelled in one module of entrypoint/rig; every other module imports its
constant, so a rename or a typo cannot split one variable into two."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoint"
NAME = re.compile(r"\bRIG_[A-Z0-9_]+\b")


def _docstrings(tree: ast.Module) -> set[int]:
    """Docstrings describe; they are documentation, not spellings the code uses."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def spelled(source: str) -> set[str]:
    """The RIG_* names in a module's string literals (f-strings' text too), docstrings left out."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return {
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        for name in NAME.findall(node.value)
    }


def spellers(files: Iterable[Path], base: Path) -> dict[str, list[str]]:
    """name -> the modules (paths under base) that spell it."""
    out: dict[str, list[str]] = {}
    for path in sorted(files):
        for name in spelled(path.read_text()):
            out.setdefault(name, []).append(str(path.relative_to(base)))
    return out


def test_the_scan_sees_literals_and_f_strings_but_not_docstrings() -> None:
    source = '''"""RIG_DOC in the module's docstring."""
A = "RIG_ONE"
def f(env):
    """RIG_DOC again."""
    return f"set RIG_TWO={env['x']}", env.get("RIG_THREE", "")
'''
    assert spelled(source) == {"RIG_ONE", "RIG_TWO", "RIG_THREE"}


def test_a_name_spelled_in_two_modules_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('OWNER = "RIG_X"\n')
    (tmp_path / "b.py").write_text('raise SystemExit("RIG_X=1 is wrong")\n')
    (tmp_path / "c.py").write_text("from a import OWNER\n")
    assert spellers(tmp_path.glob("*.py"), tmp_path) == {"RIG_X": ["a.py", "b.py"]}


def test_every_rig_variable_is_spelled_in_one_module() -> None:
    found = spellers((ENTRYPOINT / "rig").rglob("*.py"), ENTRYPOINT)
    assert found.get("RIG_CUDA_DEVICE") == ["rig/rankenv.py"], "the scan is broken"
    twice = {name: modules for name, modules in found.items() if len(modules) > 1}
    assert not twice, (
        "RIG_* variables spelled in more than one module; spell each in its owner and import the "
        f"constant elsewhere (name: modules): {twice}"
    )
