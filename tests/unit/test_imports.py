"""The package's import graph: no cycle among rig's modules at import time, the ground floor
(rig.hardware) imports none of the floors above it, launch/ never imports observe/ (what a run
carries to be seen sits below it, in instrument/), and instrument/ imports neither. Every import is
a plain one the graph reads: none by name (importlib) from one rig module of another."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "entrypoint" / "rig"

ABOVE_THE_GROUND = ("rig.launch", "rig.observe", "rig.yolo", "rig.workstation", "rig.commands")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Statements that run at import time (not inside functions or `if TYPE_CHECKING:`)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.If | ast.Try):
            yield from (s for block in _blocks(node) for s in block)
        yield node


def _blocks(node: ast.If | ast.Try) -> list[list[ast.stmt]]:
    if isinstance(node, ast.If):
        return [node.body, node.orelse]
    return [node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)]


def imports_at_load(name: str, tree: ast.Module) -> set[str]:
    """The rig modules `name` imports when it is loaded: `from rig.yolo import ultra` is rig.yolo.ultra
    when that is a module, else the package rig.yolo."""
    found: set[str] = set()
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "rig"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "rig":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_at_load(name, ast.parse(path.read_text())) for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_on_examples() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_graph_is_read() -> None:
    assert "rig.yolo.ultra" in GRAPH["rig.yolo.datasets"]
    assert "rig.hardware.topology" in GRAPH["rig.launch.job"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle at load time: " + " -> ".join(cycle or [])


def test_the_ground_floor_imports_no_floor_above_it() -> None:
    wrong = sorted(
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if name.startswith("rig.hardware")
        for dep in deps
        if dep.startswith(ABOVE_THE_GROUND)
    )
    assert not wrong, wrong


def _running_up(floor: str, above: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{name} imports {dep}"
        for name, deps in GRAPH.items()
        if name.startswith(floor)
        for dep in deps
        if dep.startswith(above)
    )


def test_launch_never_imports_what_observes_it() -> None:
    assert not _running_up("rig.launch", ("rig.observe",)), _running_up("rig.launch", ("rig.observe",))


def test_instrument_sits_below_launch() -> None:
    wrong = _running_up("rig.instrument", ("rig.launch", "rig.observe", "rig.commands", "rig.workstation"))
    assert not wrong, wrong


def test_the_augmentation_imports_nothing_that_uses_it() -> None:
    """rig.yolo.augment is machinery the trainer, the bench and the probes call: it never imports them."""
    users = ("rig.yolo.trainer", "rig.launch", "rig.observe", "rig.commands", "rig.workstation")
    assert "rig.yolo.augment.dataset" in GRAPH["rig.yolo.augment"]  # the graph reads the package
    wrong = _running_up("rig.yolo.augment", users)
    assert not wrong, wrong


def test_the_graph_sees_launch_used_by_the_bench() -> None:
    assert "rig.launch.trainer" in GRAPH["rig.observe.bench.realrun"]
    assert "rig.instrument.telemetry" in GRAPH["rig.launch.trainer"]


# The rig modules that import another rig module by name (importlib), hidden from the graph above,
# and why a plain import will not do. None today: rig.yolo.augment.dataset, which looks up
# rig.yolo.nodecache.cached_dataset's classes when a spawn-started loader worker unpickles a
# DeviceAugmented one by name, imports that module plainly.
BY_NAME: set[str] = set()


def test_the_imports_by_name_are_the_listed_ones() -> None:
    """importlib.import_module("rig....") hides an edge from the graph: each one is listed."""
    by_name = re.compile(r"""import_module\(\s*f?["']rig\.""")
    found = {name for name, path in MODULES.items() if by_name.search(path.read_text())}
    assert found == BY_NAME, (
        f"imported by name, not listed: {sorted(found - BY_NAME)}; listed, gone: {sorted(BY_NAME - found)}"
    )


def test_the_pipelines_rules_never_import_the_pipeline() -> None:
    """rig train's pipeline (launch/trainplan.py) hands its rules values: the run-folder policy, the
    batch and the argument rules import nothing of it, nor the commands above it."""
    rules = ("rig.launch.runpolicy", "rig.launch.batch", "rig.launch.trainargs", "rig.yolo.tuning")
    wrong = sorted(
        f"{name} imports {dep}"
        for name in rules
        for dep in GRAPH[name]
        if dep in {"rig.launch.trainplan", "rig.launch.job"} or dep.startswith("rig.commands")
    )
    assert not wrong, wrong
    assert "rig.launch.runpolicy" in GRAPH["rig.launch.trainplan"]
    assert "rig.launch.batch" in GRAPH["rig.launch.trainargs"]


def test_how_programs_end_and_numbers_are_read_sit_on_the_ground() -> None:
    """rig.program (every program's end) and rig.envnumbers (every number in the environment) are
    used from every floor: they import no rig module but the error type and its spelling."""
    for name in ("rig.program", "rig.envnumbers"):
        assert GRAPH[name] <= {"rig.errors", "rig.spelling"}, (name, GRAPH[name])
    users = {name for name, deps in GRAPH.items() if "rig.program" in deps}
    assert {"rig.cli", "rig.launch.trainer", "rig.launch.torchrun", "rig.launch.binder"} <= users, users
