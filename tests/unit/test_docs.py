"""The documentation keeps up with the code.

- The README is a landing page: at most 200 lines, with the test command CI runs (`make test`).
- Every relative link in README.md, BENCHMARKS.md and docs/*.md resolves: the file, and for
  `#anchor` a heading of that file (GitHub's slugs).
- docs/architecture.md's package map names every module under entrypoint/rig/, and nothing else.
- The make targets the pages name exist; docs/reference.md lists every `rig` command, every `make`
  target and every variable a user can set. "Listed" means the name appears in backticks in a
  Markdown table row, e.g. `| `RIG_UID` | `1000` | uid of user yolo ... |`; a row naming `PET_*`
  covers every PET_ variable.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.helpers import ENTRYPOINT, REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
REFERENCE = DOCS / "reference.md"
ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = ENTRYPOINT / "rig"
README_MAX_LINES = 200
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^[A-Z]{4,}$")
# Ours and Ultralytics': any such constant in the entrypoint is a variable it reads or sets.
OWN_PREFIXES = ("RIG_", "YOLO_")


# --- parsers -------------------------------------------------------------------------------------


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)  # VAR="a b" stays one word; "# ..." is dropped
    except ValueError:  # an unbalanced quote in prose
        return command.split()


def _code_commands(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
    prose = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", prose) + [line for b in blocks for line in b.splitlines()]


def readme_make_commands(text: str) -> set[str]:
    """Every `make ...` command as `make TARGET...`, its variables and options left out."""
    commands = set()
    for command in _code_commands(text):
        words = _words(command)
        if words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) and "make" in words:
            words = words[words.index("make") :]  # VAR=value VAR2="$(cmd -x)" make ...
        if not words or words[0] != "make":
            continue
        targets = []
        for word in words[1:]:
            if word.startswith("-") or "=" in word:  # options and VAR=value
                continue
            if not re.fullmatch(r"[a-zA-Z0-9_-]+", word):
                break
            targets.append(word)
        commands.add(" ".join(["make", *targets]))
    return commands


def readme_make_targets(text: str) -> set[str]:
    """Targets of every `make ...` in inline code or on a line of a fenced code block."""
    return {t for command in readme_make_commands(text) for t in command.split()[1:]}


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (where `[a](b)` is no link)."""
    text = re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def relative_links(text: str) -> list[str]:
    """Targets of inline links and images, and of reference definitions, that are not URLs."""
    prose = _prose(text)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)
    targets += re.findall(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", prose, re.M)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


def heading_anchors(text: str) -> set[str]:
    """GitHub's ids for the headings: lower case, punctuation dropped, spaces to '-', repeats -1, -2."""
    anchors: set[str] = set()
    for heading in re.findall(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", _prose_keep_code(text), re.M):
        heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
        base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slug, n = base, 0
        while slug in anchors:
            n += 1
            slug = f"{base}-{n}"
        anchors.add(slug)
    return anchors


def _prose_keep_code(text: str) -> str:
    """The text without fenced code blocks (a `# comment` there is no heading); inline code stays."""
    return re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", "", text, flags=re.S | re.M)


def link_problem(page: Path, target: str) -> str | None:
    """Why the relative link `target` on `page` does not resolve, or None."""
    path_part, _, anchor = target.partition("#")
    path = (page.parent / unquote(path_part)).resolve() if path_part else page
    if not path.exists():
        return f"{path_part}: no such file"
    if anchor and path.suffix == ".md" and anchor not in heading_anchors(path.read_text()):
        return f"#{anchor}: no such heading in {path.name}"
    return None


def package_map(text: str) -> set[str]:
    """The first cell of each table row under the heading '## Package map', in backticks."""
    section = re.search(r"^## Package map[^\n]*\n(.*?)(?=^#{1,2} |\Z)", text, re.S | re.M)
    if not section:
        return set()
    return {
        m.group(1)
        for line in section.group(1).splitlines()
        if (m := re.match(r"\s*\|\s*`([^`]+)`\s*\|", line))
    }


def package_modules(package: Path) -> set[str]:
    """Every module of the package as the map names it: `launch/job.py`, a subpackage as `launch/`."""
    names = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        if path.name == "__init__.py" and relative.parent != Path():
            names.add(f"{relative.parent.as_posix()}/")
        else:
            names.add(relative.as_posix())
    return names


def rig_commands(cli: Path) -> set[str]:
    """`rig` sub-commands: the keys of cli.py's COMMANDS (each command's name and one-line help)."""
    for node in ast.walk(ast.parse(cli.read_text())):
        if isinstance(node, ast.AnnAssign | ast.Assign) and "COMMANDS" in ast.unparse(node).split("=")[0]:
            value = ast.literal_eval(node.value) if node.value else {}
            return set(value)
    return set()


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
    assert "make test" in readme_make_commands("```\nmake test   # CI\nmake test-unit\n```\n")
    assert readme_make_commands("Run `make test-unit` or `make test PYTEST_ARGS=-x`.") == {
        "make test-unit",
        "make test",
    }
    assert "make test" not in readme_make_commands("Run `make test-unit`.")

    page = (
        "# Title\n## The workstation (`docker compose up`)\n## Notes\n## Notes\n```\n# not a heading\n```\n"
        "See [a](other.md#part-two), [b](#notes-1), [c](https://x.org/y), `[d](code.md)`, "
        '![e](img/a%20b.png "t"), [f](mailto:a@b.c).\n[g]: ../up.md\n'
    )
    assert relative_links(page) == ["other.md#part-two", "#notes-1", "img/a%20b.png", "../up.md"]
    assert heading_anchors(page) == {"title", "the-workstation-docker-compose-up", "notes", "notes-1"}
    assert heading_anchors("## Multi-node: Kubernetes and Slurm\n## Speed: `make bench`\n") == {
        "multi-node-kubernetes-and-slurm",
        "speed-make-bench",
    }

    table = (
        "## Package map\n| module | what |\n| --- | --- |\n| `cli.py` | argparse |\n"
        "| `launch/` | launches |\n"
        "| `launch/job.py` | the job |\n## Tests\n| `not/this.py` | x |\n"
    )
    assert package_map(table) == {"cli.py", "launch/", "launch/job.py"}
    assert package_map("## Packages\n| `cli.py` | x |\n") == set()
    assert make_variables("IMAGE ?= yolo-rig\nSTACK := x\nGPUS ?=\n") == {"IMAGE", "GPUS"}
    assert compose_variables("image: ${IMAGE:-yolo-rig:cu121}\nport: ${SSH_PORT}\n") == {"IMAGE", "SSH_PORT"}


def test_link_problem_on_examples(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    page = tmp_path / "docs" / "a.md"
    page.write_text("# A\n## Part two\n")
    (tmp_path / "README.md").write_text("# yolo-rig\n## Your data\n")
    assert link_problem(page, "../README.md#your-data") is None
    assert link_problem(page, "#part-two") is None
    assert link_problem(page, "../deploy") is None  # a folder
    assert link_problem(page, "../README.md#nowhere") == "#nowhere: no such heading in README.md"
    assert link_problem(page, "#nowhere") == "#nowhere: no such heading in a.md"
    assert link_problem(page, "README.md") == "README.md: no such file"  # relative to the page


def test_package_modules_on_an_example(tmp_path: Path) -> None:
    for name in (
        "__init__.py",
        "cli.py",
        "launch/__init__.py",
        "launch/job.py",
        "instrument/metrics/__init__.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert package_modules(tmp_path) == {
        "__init__.py",
        "cli.py",
        "launch/",
        "launch/job.py",
        "instrument/metrics/",
    }


# --- the pages ----------------------------------------------------------------------------------


def doc_pages() -> list[Path]:
    return [README, REPO / "BENCHMARKS.md", *sorted(DOCS.glob("*.md"))]


def _read(path: Path) -> str:
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO)} is missing")
    return path.read_text()


@pytest.fixture(scope="module")
def reference() -> str:
    return _read(REFERENCE)


@functools.cache
def make_help_targets() -> frozenset[str]:
    """The targets `make help` prints ("  name   description"), not a sub-make's "make[1]: Entering ..."."""
    out = subprocess.run(
        ["make", "--no-print-directory", "help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return frozenset(re.findall(r"^  ([a-zA-Z0-9_-]+) ", out.stdout, re.M))


def test_the_readme_is_a_landing_page() -> None:
    lines = _read(README).splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move the detail to a page of docs/"
    )
    # .ci/run runs "the README's test command": it must stay there, as a command a reader can copy.
    assert "make test" in readme_make_commands(_read(README)), "README.md no longer shows `make test`"


def test_every_make_target_in_the_docs_exists() -> None:
    named = {t: page for page in doc_pages() for t in readme_make_targets(_read(page))}
    assert named, "the docs name no `make` target; the README should show at least the two commands"
    listed = make_help_targets()
    unknown = {t: str(page.relative_to(REPO)) for t, page in named.items() if t not in listed}
    assert not unknown, f"make targets the docs name but `make help` does not list (target: page): {unknown}"


def test_every_make_target_is_in_the_reference(reference: str) -> None:
    listed = set(re.findall(r"^\s*\|\s*`make ([a-z0-9-]+)`", reference, re.M))
    missing = sorted(set(make_help_targets()) - listed)
    assert not missing, (
        f"`make help` targets missing from the table of {REFERENCE.relative_to(REPO)}: {missing}"
    )


def test_every_relative_link_resolves() -> None:
    broken = [
        f"{page.relative_to(REPO)}: ({target}) {why}"
        for page in doc_pages()
        for target in relative_links(_read(page))
        if (why := link_problem(page, target))
    ]
    assert not broken, "links that do not resolve:\n" + "\n".join(broken)


def test_the_package_map_names_every_module() -> None:
    named = package_map(_read(ARCHITECTURE))
    assert named, (
        f"found no package map in {ARCHITECTURE.relative_to(REPO)}: the table under '## Package map'"
    )
    expected = package_modules(PACKAGE)
    missing = sorted(expected - named)
    extra = sorted(named - expected)
    lines = [f"missing: entrypoint/rig/{m} (add the row `| `{m}` | what it is for |`)" for m in missing]
    lines += [f"extra: `{m}` names no module under entrypoint/rig/ (remove or rename its row)" for m in extra]
    assert not lines, "docs/architecture.md's package map is out of date:\n" + "\n".join(lines)


def test_every_rig_command_is_in_the_reference(reference: str) -> None:
    commands = rig_commands(PACKAGE / "cli.py")
    assert commands, "found no commands in rig/cli.py's COMMANDS: the scan is broken"
    listed = set(re.findall(r"^\s*\|\s*`rig ([a-z-]+)", reference, re.M))
    missing = sorted(commands - listed)
    assert not missing, f"`rig` commands missing from the table of {REFERENCE.relative_to(REPO)}: {missing}"


def test_every_variable_the_entrypoint_reads_is_documented(reference: str) -> None:
    names = entrypoint_env_vars(PACKAGE.rglob("*.py"))
    assert names, "found no environment variables in entrypoint/rig: the scan is broken"
    documented = documented_names(reference)
    missing = {n: m for n, m in names.items() if not is_documented(n, documented)}
    assert not missing, (
        "environment variables the entrypoint reads but docs/reference.md's tables do not list "
        f"(name: module): {missing}"
    )


def test_every_make_variable_is_documented(reference: str) -> None:
    variables = make_variables((REPO / "Makefile").read_text())
    documented = documented_names(reference)
    missing = sorted(v for v in variables if not is_documented(v, documented))
    assert not missing, (
        f"Makefile variables (VAR ?= default) missing from docs/reference.md's tables: {missing}"
    )


def test_every_compose_variable_is_documented(reference: str) -> None:
    variables: set[str] = set()
    for compose in REPO.glob("compose*.yaml"):
        variables |= compose_variables(compose.read_text())
    documented = documented_names(reference)
    missing = sorted(v for v in variables if not is_documented(v, documented))
    assert not missing, (
        f"compose variables (${{VAR:-default}}) missing from docs/reference.md's tables: {missing}"
    )


# --- defaults: reference.md against the Makefile, compose and the code ----------------------------
#
# reference.md gives each variable once, in one row of a table whose header starts `| Variable |`,
# with its default in the second cell. Where make and compose default a variable differently, the
# cell says both: "make: ...; compose: ...". A cell (or that part of it) says "empty", "required" or
# "none" for no value, and otherwise gives the value as its first `code span`; a row naming several
# variables gives their values in the same order (`10m`, `5`). Computed defaults (`$(...)` in the
# Makefile, a function in the code) are prose and are not compared.

NO_VALUE = ("empty", "required", "none", "unset")


def variable_rows(text: str) -> list[tuple[list[str], str]]:
    """(names, default cell) for each row of the tables whose header starts with `| Variable |`."""
    rows: list[tuple[list[str], str]] = []
    in_table = False
    for line in text.splitlines():
        if re.match(r"^\|\s*Variable\s*\|", line):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table and not re.match(r"^\|\s*-", line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            names = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?)`", cells[0].split("(")[0])
            rows.append((names, cells[1] if len(cells) > 1 else ""))
    return rows


def documented_default(cell: str, source: str, index: int) -> str | None:
    """The value the cell gives for the `index`-th name from `source` ("make" or "compose"): "" for
    no value, None when it says no literal (prose)."""
    parts = dict(re.findall(r"\b(make|compose):\s*([^;]*)", cell))
    cell = parts.get(source, cell if not parts else "")
    if cell.lower().startswith(NO_VALUE):
        return ""
    spans = re.findall(r"`([^`]*)`", cell)
    if not spans or not cell.startswith("`"):
        return None
    return spans[index] if index < len(spans) else spans[0]


def makefile_defaults(makefile: str) -> dict[str, str]:
    return {m[1]: m[2].strip() for m in re.finditer(r"^([A-Z][A-Z0-9_]*)\s*\?=[ \t]*(.*)$", makefile, re.M)}


def compose_defaults(compose: str) -> dict[str, str]:
    """${NAME:-default} of a compose file, a default's own ${...} included."""
    found: dict[str, str] = {}
    for name, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-((?:[^{}]|\$\{[^}]*\})*)\}", compose):
        found[name] = default
        found.update(compose_defaults(default))
    return found


def _constant(node: ast.expr, constants: dict[str, object]) -> object:
    """A literal, a module constant, or arithmetic on them (30 * 60); else None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult | ast.Add):
        left, right = _constant(node.left, constants), _constant(node.right, constants)
        if isinstance(left, int | float) and isinstance(right, int | float):
            return left * right if isinstance(node.op, ast.Mult) else left + right
    return None


def code_defaults(source: str) -> dict[str, set[str]]:
    """The defaults a module gives variables: environ.get(NAME, DEFAULT), getenv(NAME, DEFAULT),
    helpers called as f(environ, NAME, DEFAULT, ...) and numbers declared as
    envnumbers.Number(NAME, ..., default=DEFAULT), DEFAULT a literal or a module constant."""
    tree = ast.parse(source)
    constants: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = _constant(node.value, constants)
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        args = list(node.args)
        getter = (
            isinstance(node.func, ast.Attribute) and node.func.attr == "get" and _is_environ(node.func.value)
        )
        default_kw = next((k.value for k in node.keywords if k.arg == "default"), None)
        if getter or ast.unparse(node.func) in {"os.getenv", "getenv"}:
            pair = args[:2]
        elif ast.unparse(node.func) in {"envnumbers.Number", "Number"} and args and default_kw is not None:
            pair = [args[0], default_kw]
        else:
            at = next((i for i, a in enumerate(args) if _is_environ(a)), None)
            pair = args[at + 1 : at + 3] if at is not None else []
        if len(pair) == 2:
            name, default = _constant(pair[0], constants), _constant(pair[1], constants)
            if isinstance(name, str) and ENV_NAME.match(name) and default not in (None, ""):
                found.setdefault(name, set()).add(_same(str(default)))
    return found


def _same(value: str) -> str:
    """60.0 and 60 are one default."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:g}"


def dockerfile_defaults(dockerfile: str) -> dict[str, str]:
    """ENV NAME=VALUE of the Dockerfile (continued lines joined); values with ${...} left out."""
    text = dockerfile.replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in re.findall(r"^ENV\s+(.*)$", text, re.M):
        for name, value in re.findall(r"([A-Z][A-Z0-9_]*)=(\"[^\"]*\"|\S+)", line):
            if "$" not in value:
                found[name] = value.strip('"')
    return found


def test_default_parsers_on_examples() -> None:
    text = (
        "| Variable | Default | Meaning |\n| --- | --- | --- |\n"
        "| `IMAGE` | make: `yolo-rig`; compose: `x:y` | i |\n"
        "| `A`, `B` | `10m`, `5` | two |\n| `C` | empty: the volume | c |\n| `D` | your `id -u` | d |\n\n"
        "| Other | Default |\n|---|---|\n| `E` | `1` |\n"
    )
    rows = variable_rows(text)
    assert rows == [(["IMAGE"], "make: `yolo-rig`; compose: `x:y`"), (["A", "B"], "`10m`, `5`"),
                    (["C"], "empty: the volume"), (["D"], "your `id -u`")]  # fmt: skip
    assert documented_default(rows[0][1], "make", 0) == "yolo-rig"
    assert documented_default(rows[0][1], "compose", 0) == "x:y"
    assert [documented_default(rows[1][1], "make", i) for i in (0, 1)] == ["10m", "5"]
    assert documented_default(rows[2][1], "make", 0) == ""
    assert documented_default(rows[3][1], "make", 0) is None
    assert makefile_defaults("A ?= 1\nB ?=\nC ?= $(shell x)\nD := 2\n") == {
        "A": "1",
        "B": "",
        "C": "$(shell x)",
    }
    assert compose_defaults("image: ${IMAGE:-yolo-rig:${STACK:-cu121}}\n  p: ${P:-}\n") == {
        "IMAGE": "yolo-rig:${STACK:-cu121}",
        "STACK": "cu121",
        "P": "",
    }
    source = (
        "T_S = 30 * 60\nG = 'RIG_G'\ndef f(environ):\n    environ.get('RIG_A', '60')\n"
        "    _seconds(environ, 'RIG_T', T_S, 60, 86400)\n    os.getenv(G, 1.0)\n"
        "N = envnumbers.Number('RIG_N', low=0, default=T_S, unit='seconds')\n"
    )
    assert code_defaults(source) == {"RIG_A": {"60"}, "RIG_T": {"1800"}, "RIG_G": {"1"}, "RIG_N": {"1800"}}
    assert dockerfile_defaults('ENV A=1 \\\n    B="x y" \\\n    C=${D}\n') == {"A": "1", "B": "x y"}


def test_each_variable_is_in_the_reference_once(reference: str) -> None:
    seen: dict[str, int] = {}
    for names, _ in variable_rows(reference):
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    assert seen, "found no `| Variable |` table in docs/reference.md: the parser is broken"
    twice = sorted(n for n, count in seen.items() if count > 1)
    assert not twice, f"variables in more than one row of docs/reference.md (give each one row): {twice}"


def _differences(reference: str, source: str, defaults: dict[str, str]) -> tuple[int, list[str]]:
    checked, wrong = 0, []
    for names, cell in variable_rows(reference):
        for i, name in enumerate(names):
            if name not in defaults or "$" in defaults[name]:
                continue
            said = documented_default(cell, source, i)
            if said is None:
                wrong.append(
                    f"{name}: {source} says {defaults[name]!r}, the reference gives no value: {cell!r}"
                )
                continue
            checked += 1
            if said != defaults[name]:
                wrong.append(f"{name}: {source} says {defaults[name]!r}, the reference {said!r}")
    return checked, wrong


def test_make_and_compose_defaults_are_the_references(reference: str) -> None:
    """Each default docs/reference.md gives is the Makefile's (VAR ?= default) and compose's
    (${VAR:-default}); a change to either without the page fails here."""
    make = makefile_defaults((REPO / "Makefile").read_text())
    compose: dict[str, str] = {}
    for path in sorted(REPO.glob("compose*.yaml")):
        compose.update(compose_defaults(path.read_text()))
    checked_make, wrong_make = _differences(reference, "make", make)
    checked_compose, wrong_compose = _differences(reference, "compose", compose)
    assert not wrong_make + wrong_compose, "defaults that differ:\n" + "\n".join(wrong_make + wrong_compose)
    assert checked_make >= 20 and checked_compose >= 10, (checked_make, checked_compose)


def test_container_defaults_are_the_codes(reference: str) -> None:
    """The defaults of the variables the container reads, against the code that reads them and the
    Dockerfile's ENV: where the code gives a variable literal defaults, the reference names one."""
    code: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, values in code_defaults(path.read_text()).items():
            code.setdefault(name, set()).update(values)
    for name, value in dockerfile_defaults((REPO / "Dockerfile").read_text()).items():
        code.setdefault(name, set()).add(_same(value))
    checked, wrong = 0, []
    for names, cell in variable_rows(reference):
        for i, name in enumerate(names):
            said = documented_default(cell.split("(")[0], "container", i)
            if name not in code or not said:
                continue
            checked += 1
            if _same(said) not in code[name]:
                wrong.append(
                    f"{name}: the code's defaults are {sorted(code[name])}, the reference says {said!r}"
                )
    assert not wrong, "defaults that differ:\n" + "\n".join(wrong)
    assert checked >= 15, f"only {checked} defaults compared: the scan is broken"


def named_files(text: str) -> set[str]:
    """Python files the prose names in code spans, e.g. `launch/job.py` or `tools/measure_cli.py`."""
    return set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.py)(?::\w+)?`", _prose_keep_code(text)))


def test_every_file_the_docs_name_exists() -> None:
    """A module the docs point to is where they say (a path relative to the repository, to
    entrypoint/ or to the package rig/)."""
    roots = (REPO, REPO / "entrypoint", PACKAGE)
    # Ours: the repository's folders, the package and its subpackages (not torch/..., ultralytics/...).
    ours = {p.name for root in roots for p in root.iterdir() if p.is_dir()} | {"rig"}
    missing = sorted(
        f"{page.relative_to(REPO)}: {name}"
        for page in doc_pages()
        for name in named_files(_read(page))
        if name.split("/")[0] in ours
        and not re.search(r"/[A-Z_]+\.py$", name)  # a placeholder: rig/commands/COMMAND.py
        and not any((root / name).exists() for root in roots)
    )
    assert not missing, "files the docs name that do not exist:\n" + "\n".join(missing)


def test_benchmarks_open_with_the_current_figures() -> None:
    """BENCHMARKS.md's first section is one table of the current figures, each with its date and
    the command that measures it; the runs behind them follow under History."""
    text = _read(REPO / "BENCHMARKS.md")
    sections = re.findall(r"^## (.+)$", _prose_keep_code(text), re.M)
    assert sections[:2] == ["Current figures", "History"], sections[:2]
    table = text.split("## Current figures", 1)[1].split("## History", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("|") and not line.startswith("| ---")]
    assert rows[0].split("|")[1:5] == [" what ", " figure ", " date ", " command "], rows[0]
    undated = []
    for row in rows[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        if len(cells) != 4 or not re.search(r"\d{4}-\d{2}-\d{2}", cells[2]) or not cells[3]:
            undated.append(row)
    assert len(rows) > 10 and not undated, "rows without a date or a command:\n" + "\n".join(undated)


# How the project was made is no part of the product: the docs say what it does and what was measured.
MAKING = re.compile(
    r"(?<!ultralytics )\bissues? #?\d+|\bitem \d+\b|\bengineers?\b|\bthis round\b|\bof mine\b"
    r"|\bthe lead\b|\bworktree\b",
    re.I,
)


def test_the_docs_speak_of_the_product_not_of_its_making() -> None:
    found = [
        f"{page.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for page in [*doc_pages(), REPO / "CHANGELOG.md"]
        for n, line in enumerate(_read(page).splitlines(), 1)
        if MAKING.search(line)
    ]
    assert not found, "words about how the project was made, in user docs:\n" + "\n".join(found)
