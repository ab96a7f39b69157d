"""The wheels a lent GPU box lacks for tools/gpu_check.sh, derived rather than listed by hand.

    python3 tools/gpu_wheels.py [--dest .whl] [--python-version 3.12] [--list]

1. What runs there imports: the modules reachable from the commands the check starts (rig train, plan,
   launch, bench, doctor, demo-data, the rank's trainer) and the check's own Python (ENTRIES), followed
   through rig's imports, each `import`, `from ... import` and `importlib.import_module("literal")`
   (rig hides torch and Ultralytics behind such calls).
2. Each third-party module's distribution (ALIASES where the names differ), then those distributions'
   dependencies from uv.lock, stopping at what the box has (tools/gpu-box-packages.txt: the box
   brings each of those with its own dependencies).
3. The rest, at uv.lock's versions and hashes: `pip download --only-binary=:all:` for the box's Python
   and manylinux, or for a package the lock holds only as an sdist (pure Python), `pip wheel` from it.
   Nothing is fetched when --dest already holds exactly that set for that Python (its .stamp).
The set must fit the 64 MiB that travel with the tree. Standard library only (tomllib: Python 3.11+).

tools/gpu-box-packages.txt is a copy of the box's reading (../shared/gpu-box-packages.txt beside the
checkout, where a workplace has it, is the original; a unit test fails when the two differ).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOX_LIST = REPO / "tools" / "gpu-box-packages.txt"
LIMIT = 64 << 20  # what travels with the tree to the box, wheels included
# Where each call begins: rig's commands the check runs (and the processes they start), the check's Python.
ENTRIES = (
    "entrypoint/rig/__main__.py",
    "entrypoint/rig/cli.py",
    "entrypoint/rig/commands/train.py",
    "entrypoint/rig/commands/plan.py",
    "entrypoint/rig/commands/launch.py",
    "entrypoint/rig/commands/bench.py",
    "entrypoint/rig/commands/doctor.py",
    "entrypoint/rig/commands/demo_data.py",
    "entrypoint/rig/launch/trainer.py",
    "entrypoint/rig/launch/torchrun.py",
    "entrypoint/rig/launch/binder.py",
    "tools/gpu_check.py",
    "tests/scripts/device_augment_probe.py",
)
# Import name -> distribution, where they differ (the others: the import name with '-' for '_').
ALIASES = {
    "cv2": "opencv-python-headless",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "pynvml": "nvidia-ml-py",
    "hostlist": "python-hostlist",
    "ultralytics": "ultralytics-opencv-headless",
    "absl": "absl-py",
    "google": "protobuf",
    "dateutil": "python-dateutil",
    "thop": "ultralytics-thop",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
}
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
# pip itself: PIP, else this Python's, else the host's python3's (a uv venv has none).
_OWN_PIP = importlib.util.find_spec("pip") is not None
PIP = shlex.split(os.environ.get("PIP", f"{sys.executable if _OWN_PIP else 'python3'} -m pip"))


class WheelError(Exception):
    """One line for the user: what is wrong, how to fix it."""


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def distribution(module: str) -> str:
    return ALIASES.get(module, normalize(module))


def box_packages(path: Path = BOX_LIST) -> set[str]:
    """The box's distributions (its list: a name a line, '==version' where one was seen, # comments)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalize(line.split("==", 1)[0]))
    return names


# ---------------------------------------------------------------------------------------------
# What runs there imports


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "text" assignments (ultra.PACKAGE = "ultralytics")."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _dynamic(call: ast.Call, strings: Mapping[str, str]) -> set[str]:
    """The modules an import_module(...) / __import__(...) call can name: its literal strings and the
    module-level strings it uses, each up to its first dot."""
    names = set()
    for arg in call.args[:1]:
        for node in ast.walk(arg):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.Name) and node.id in strings:
                text = strings[node.id]
            head = (text or "").split(".")[0]
            if head.isidentifier():
                names.add(head)
    return names


def imports_of(source: str) -> set[str]:
    """Every module a file imports (dotted as written; dynamic ones by their top name)."""
    tree = ast.parse(source)
    strings = _module_strings(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in {"import_module", "__import__"}:
                found |= _dynamic(node, strings)
    return found


def _rig_file(module: str, root: Path) -> Path | None:
    base = root / "entrypoint" / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def third_party(root: Path = REPO, entries: Iterable[str] = ENTRIES) -> dict[str, str]:
    """Each third-party top-level module reachable from the entries -> the first file importing it."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    queue = [root / e for e in entries]
    seen: set[Path] = set()
    found: dict[str, str] = {}
    while queue:
        path = queue.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for module in sorted(imports_of(path.read_text())):
            top = module.split(".")[0]
            if top == "rig":
                parts = module.split(".")
                queue += [p for i in range(1, len(parts) + 1) if (p := _rig_file(".".join(parts[:i]), root))]
            elif (root / "tools" / f"{top}.py").is_file():  # the check's own helpers, beside it
                queue.append(root / "tools" / f"{top}.py")
            elif top not in stdlib and top != "tools":
                found.setdefault(top, str(path.relative_to(root)))
    return found


# ---------------------------------------------------------------------------------------------
# The lock's versions and what the box lacks


@dataclass(frozen=True)
class Locked:
    name: str
    version: str
    wheels: tuple[tuple[str, str], ...]  # (file name, sha256)
    sdist: tuple[str, str] | None
    depends: tuple[str, ...]


def read_lock(path: Path) -> dict[str, Locked]:
    """uv.lock's packages by name; where it holds several versions (one per stack), the last resolved
    (the newest stack's: the box's torch is newer than any stack's)."""
    found = {}
    for p in tomllib.loads(path.read_text())["package"]:
        if "version" not in p:
            continue

        def file_of(entry: Mapping[str, str]) -> tuple[str, str]:
            return entry["url"].rsplit("/", 1)[1], entry["hash"].removeprefix("sha256:")

        sdist = p.get("sdist")
        found[p["name"]] = Locked(
            p["name"],
            p["version"],
            tuple(file_of(w) for w in p.get("wheels", [])),
            file_of(sdist) if sdist and "url" in sdist else None,
            tuple(
                sorted({d["name"] for d in p.get("dependencies", []) if "extra" not in d.get("marker", "")})
            ),
        )
    return found


def lacking(modules: Mapping[str, str], lock: Mapping[str, Locked], box: set[str]) -> list[Locked]:
    """The locked distributions the box lacks for these modules, with their dependencies."""
    wanted: list[str] = []
    for module, where in sorted(modules.items()):
        dist = distribution(module)
        if dist in box:
            continue
        if dist not in lock:
            raise WheelError(
                f"{where} imports {module}, which is neither on the GPU box ({BOX_LIST.name}) nor a "
                f"distribution in uv.lock; add it to pyproject.toml, or its distribution to ALIASES in "
                f"{Path(__file__).name}"
            )
        wanted.append(dist)
    out: dict[str, Locked] = {}
    while wanted:
        name = wanted.pop()
        if name in out or name in box:
            continue
        out[name] = lock[name]
        wanted += [d for d in lock[name].depends if d in lock]
    return sorted(out.values(), key=lambda p: p.name)


def derive(root: Path = REPO, box_list: Path = BOX_LIST) -> list[Locked]:
    return lacking(third_party(root), read_lock(root / "uv.lock"), box_packages(box_list))


# ---------------------------------------------------------------------------------------------
# Fetching


def _pip(args: list[str]) -> None:
    r = subprocess.run([*PIP, *args], capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise WheelError(f"pip {args[0]} failed: {' / '.join(tail)}")


def tree_bytes(root: Path = REPO) -> int:
    """What else travels: the tracked files (0 outside a git checkout)."""
    r = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=False)
    paths = (
        [root / p for p in r.stdout.decode(errors="replace").split("\0") if p] if r.returncode == 0 else []
    )
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def fetch(packages: list[Locked], dest: Path, python_version: str) -> list[Path]:
    """The wheels into dest (others there removed: one version of each); nothing fetched when the
    stamp says dest holds exactly these for this Python."""
    stamp_text = f"python {python_version}\n" + "".join(f"{p.name}=={p.version}\n" for p in packages)
    stamp = dest / ".stamp"
    dest.mkdir(parents=True, exist_ok=True)
    if stamp.is_file() and stamp.read_text() == stamp_text and len(list(dest.glob("*.whl"))) == len(packages):
        return sorted(dest.glob("*.whl"))
    for old in dest.glob("*.whl"):
        old.unlink()
    binary = [p for p in packages if p.wheels]
    with tempfile.TemporaryDirectory() as tmp:
        if binary:
            req = Path(tmp) / "wheels.txt"
            req.write_text(
                "".join(
                    f"{p.name}=={p.version} " + " ".join(f"--hash=sha256:{h}" for _, h in p.wheels) + "\n"
                    for p in binary
                )
            )
            platforms = [a for plat in PLATFORMS for a in ("--platform", plat)]
            _pip(
                [
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--require-hashes",
                    "--implementation",
                    "cp",
                    "--python-version",
                    python_version,
                    *platforms,
                    "-d",
                    str(dest),
                    "-r",
                    str(req),
                ]
            )
        for p in packages:
            if p.wheels:
                continue
            if p.sdist is None:
                raise WheelError(f"uv.lock has neither a wheel nor an sdist of {p.name} {p.version}")
            req = Path(tmp) / f"{p.name}.txt"
            req.write_text(f"{p.name}=={p.version} --hash=sha256:{p.sdist[1]}\n")
            _pip(["wheel", "--quiet", "--no-deps", "--require-hashes", "-w", str(dest), "-r", str(req)])
    wheels = sorted(dest.glob("*.whl"))
    impure = [
        w.name
        for w in wheels
        if not any(p.wheels for p in packages if w.name.startswith(p.name.replace("-", "_")))
        and not w.name.endswith("-py3-none-any.whl")
    ]
    if impure:
        raise WheelError(
            f"built from an sdist but not pure Python, so not for the box's Python: {', '.join(impure)}"
        )
    size = sum(w.stat().st_size for w in wheels)
    tree = tree_bytes()
    if size + tree > LIMIT:
        raise WheelError(
            f"the wheels take {size / 2**20:.1f} MiB and the tree {tree / 2**20:.1f} MiB, over the "
            f"{LIMIT >> 20} MiB that travel to the box"
        )
    stamp.write_text(stamp_text)
    return wheels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=REPO / ".whl", help="folder for the wheels (default .whl/)")
    ap.add_argument("--python-version", default="3.12", help="the box's Python (default 3.12)")
    ap.add_argument("--box", type=Path, default=BOX_LIST, help="the box's package list")
    ap.add_argument("--list", action="store_true", help="print the set, fetch nothing")
    args = ap.parse_args(argv)
    try:
        packages = derive(REPO, args.box)
        if args.list:
            print("\n".join(f"{p.name}=={p.version}" for p in packages))
            return 0
        wheels = fetch(packages, args.dest, args.python_version)
    except WheelError as e:
        print(f"ERROR gpu-wheels: {e}", file=sys.stderr)
        return 1
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(
        f"INFO gpu-wheels: {len(wheels)} wheels for Python {args.python_version} in {args.dest} "
        f"({size:.1f} MiB): " + ", ".join(f"{p.name}=={p.version}" for p in packages)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
