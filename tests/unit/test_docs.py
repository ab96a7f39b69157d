"""The README keeps up with the code: its make targets exist, and every variable a user can set is listed.

"Documented" means the name appears in backticks in a Markdown table row of README.md, e.g.
`| `RIG_UID` | `1000` | uid of user yolo ... |`; a row naming `PET_*` covers every PET_ variable.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.helpers import ENTRYPOINT, REPO

README = REPO / "README.md"
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^[A-Z]{4,}$")
# Ours and Ultralytics': any such constant in the entrypoint is a variable it reads or sets.
OWN_PREFIXES = ("RIG_", "YOLO_")


# --- parsers -------------------------------------------------------------------------------------


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)  # VAR="a b" stays one word; "# ..." is dropped
    except ValueError:  # an unbalanced quote in prose
        return command.split()


def readme_make_targets(text: str) -> set[str]:
    """Targets of every `make ...` in inline code or on a line of a fenced code block."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    prose = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
    commands = re.findall(r"`([^`\n]+)`", prose) + [line for b in blocks for line in b.splitlines()]
    targets = set()
    for command in commands:
        words = _words(command)
        if words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) and "make" in words:
            words = words[words.index("make") :]  # VAR=value VAR2="$(cmd -x)" make ...
        if not words or words[0] != "make":
            continue
        for word in words[1:]:
            if word.startswith("-") or "=" in word:  # options and VAR=value
                continue
            if not re.fullmatch(r"[a-zA-Z0-9_-]+", word):
                break
            targets.add(word)
    return targets


def documented_names(text: str) -> set[str]:
    """Every `NAME` in backticks on a table row."""
    return {
        name
        for line in text.splitlines()
        if line.lstrip().startswith("|")
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?)(?:=[^`]*)?`", line)
    }


def is_documented(name: str, documented: set[str]) -> bool:
    return name in documented or any(d.endswith("*") and name.startswith(d[:-1]) for d in documented)


def _is_environ(node: ast.expr) -> bool:
    """os.environ, environ, env, self.environ, ...: the mappings the entrypoint reads variables from."""
    text = ast.unparse(node)
    return text in {"env", "environ"} or text.endswith((".environ", ".env"))


def env_reads(source: str) -> set[str]:
    """Variables a module reads: environ.get/[]/in/setdefault/pop, getenv, helper(environ, "NAME")."""
    tree = ast.parse(source)
    constants = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def name_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return constants.get(node.id)
        return None

    found: set[str | None] = set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in {"get", "setdefault", "pop"}:
                if _is_environ(func.value) and node.args:
                    found.add(name_of(node.args[0]))
            elif ast.unparse(func) in {"os.getenv", "getenv"} and node.args:
                found.add(name_of(node.args[0]))
            elif any(_is_environ(a) for a in node.args):  # _int(env, "NNODES", 1)
                found.update(n for a in node.args if (n := name_of(a)) and ENV_NAME.match(n))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            key = name_of(node.slice)
            dynamic |= key is None
            found.add(key)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In | ast.NotIn)
            and _is_environ(node.comparators[0])
        ):
            found.add(name_of(node.left))
    if dynamic:  # environ[name] over a table: the table's first column holds the names
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and node.elts:
                found.add(name_of(node.elts[0]))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(OWN_PREFIXES)
        ):
            found.add(node.value)
    return {n for n in found if n and ENV_NAME.match(n)}


def entrypoint_env_vars(files: Iterable[Path]) -> dict[str, str]:
    """name -> the first module that reads it."""
    names: dict[str, str] = {}
    for path in sorted(files):
        for name in sorted(env_reads(path.read_text())):
            names.setdefault(name, path.name)
    return names


def make_variables(makefile: str) -> set[str]:
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*\?=", makefile, re.M))


def compose_variables(compose: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?[-?][^}]*)?\}", compose))


# --- the parsers, on examples -------------------------------------------------------------------


def test_parsers_on_examples() -> None:
    readme = (
        "Run `make up`, then `make GPUS=2 train`.\n```bash\nmake build\nmake export WEIGHTS=best.pt\n"
        'make bench BENCH_ARGS="--imgsz 640 --batch 32"   # a comment, make lint\n'
        "RIG_UID=$(id -u) make down\n make up ──► docker compose\n```\n"
        "| Variable | Default | Meaning |\n|---|---|---|\n| `RIG_UID` | `1000` | uid |\n"
        "| `PET_*` | | Kubeflow's |\nNot in a table: `SECRET_THING`\n"
    )
    assert readme_make_targets(readme) == {"up", "train", "build", "export", "bench", "down"}
    documented = documented_names(readme)
    assert is_documented("RIG_UID", documented)
    assert is_documented("PET_NNODES", documented)
    assert not is_documented("SECRET_THING", documented)

    source = """
import os
MARKER = "RIG_ENV_DEFAULTS"
TABLE = [("NCCL_DEBUG", "WARN", "why")]
def f(environ, env):
    a = os.environ.get("RIG_UID", "1000")
    b = environ["NNODES"]; c = "MASTER_ADDR" in env; d = os.getenv("HOME_DIR")
    e = _int(env, "NODE_RANK", 0); g = environ.get(MARKER); os.environ.setdefault("YOLO_VERBOSE", "False")
    for name, _, _ in TABLE:
        h = environ[name]
    x = {"key": "value"}.get("NOT_ENV")
"""
    assert env_reads(source) == {
        "RIG_UID",
        "NNODES",
        "MASTER_ADDR",
        "HOME_DIR",
        "NODE_RANK",
        "RIG_ENV_DEFAULTS",
        "YOLO_VERBOSE",
        "NCCL_DEBUG",
    }
    assert make_variables("IMAGE ?= yolo-rig\nSTACK := x\nGPUS ?=\n") == {"IMAGE", "GPUS"}
    assert compose_variables("image: ${IMAGE:-yolo-rig:cu121}\nport: ${SSH_PORT}\n") == {"IMAGE", "SSH_PORT"}


# --- the README ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def readme() -> str:
    if not README.is_file():
        pytest.fail("README.md is missing")
    return README.read_text()


def test_every_make_target_in_the_readme_exists(readme: str) -> None:
    named = readme_make_targets(readme)
    assert named, "the README names no `make` target; it should show at least the two commands"
    out = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    assert named <= listed, (
        f"README names make targets that `make help` does not list: {sorted(named - listed)}"
    )


def test_every_variable_the_entrypoint_reads_is_documented(readme: str) -> None:
    names = entrypoint_env_vars((ENTRYPOINT / "rig").rglob("*.py"))
    assert names, "found no environment variables in entrypoint/rig: the scan is broken"
    documented = documented_names(readme)
    missing = {n: m for n, m in names.items() if not is_documented(n, documented)}
    assert not missing, (
        "environment variables the entrypoint reads but README.md's tables do not list "
        f"(name: module): {missing}"
    )


def test_every_make_variable_is_documented(readme: str) -> None:
    variables = make_variables((REPO / "Makefile").read_text())
    documented = documented_names(readme)
    missing = sorted(v for v in variables if not is_documented(v, documented))
    assert not missing, f"Makefile variables (VAR ?= default) missing from README.md's tables: {missing}"


def test_every_compose_variable_is_documented(readme: str) -> None:
    variables: set[str] = set()
    for compose in REPO.glob("compose*.yaml"):
        variables |= compose_variables(compose.read_text())
    documented = documented_names(readme)
    missing = sorted(v for v in variables if not is_documented(v, documented))
    assert not missing, f"compose variables (${{VAR:-default}}) missing from README.md's tables: {missing}"
