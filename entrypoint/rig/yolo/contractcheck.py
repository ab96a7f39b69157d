"""The contract (rig.yolo.contract) checked against an Ultralytics package's source, never imported.

`check(package_dir)` reads the modules the contract names with `ast` and says, for each listed
name, whether this release still has it: a module function or class, a class's attribute (assigned
on `self` in the class or one of its Ultralytics bases, or defined in its body), a method whose
parameters still accept what rig passes (positional-only parameters of the contract's signature
are passed by position, the others by keyword) or, for one rig overrides, are still the ones rig's
override takes; a module global rig swaps, still read where the swap needs it; a key, still made
where the contract says; a callback event. Discovery takes a root path: the unit test runs it on
the locked wheel's files, `rig train` on the installed package.

Reading the source costs about 0.2 s, so the image bakes the report of its own Ultralytics
(`python -m rig.yolo.contractcheck --bake FILE`, keyed by a digest of the files read and of the
contract itself) and `installed_report` uses it when nothing changed: a few milliseconds.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import inspect
import json
import os
import re
import sys
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rig import program
from rig.errors import RigError
from rig.yolo import contract
from rig.yolo.contract import Feature, Use

BAKED = Path("/opt/rig/ultralytics-contract.json")
_PARAM_KINDS = inspect.Parameter


@dataclass(frozen=True)
class Missing:
    """A listed name this release lacks or changed: `feature` turns off (CORE: rig cannot train)."""

    feature: str  # Feature.key
    name: str  # where rig looked: "engine.trainer:BaseTrainer.save_model"
    why: str

    def describe(self) -> str:
        return f"{self.name} ({self.why})"


@dataclass(frozen=True)
class Report:
    version: str
    location: str  # the package's folder
    missing: tuple[Missing, ...] = ()
    files: tuple[str, ...] = ()  # read, relative to the package's folder

    def off(self) -> list[Feature]:
        keys = {m.feature for m in self.missing}
        return [f for f in contract.FEATURES if f.key in keys]

    def first_missing(self, feature: Feature) -> Missing | None:
        return next((m for m in self.missing if m.feature == feature.key), None)

    def feature_on(self, feature: Feature) -> bool:
        return self.first_missing(feature) is None


# ---- reading the package --------------------------------------------------------------------------


class Source:
    """The package's modules, parsed once each (the files read are recorded for the digest)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.read: dict[str, str] = {}  # relative path -> its text
        self._trees: dict[str, ast.Module | None] = {}

    def file_of(self, module: str) -> str | None:
        base = module.replace(".", "/") if module else ""
        for rel in (f"{base}.py", f"{base}/__init__.py".lstrip("/")):
            if rel != ".py" and (self.root / rel).is_file():
                return rel
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            rel = self.file_of(module)
            if rel is None:
                self._trees[module] = None
            else:
                text = (self.root / rel).read_text(encoding="utf-8", errors="replace")
                self.read[rel] = text
                self._trees[module] = ast.parse(text)
        return self._trees[module]

    def text(self, rel: str) -> str | None:
        path = self.root / rel
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8", errors="replace")
        self.read[rel] = text
        return text


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """A module's top-level statements, those inside top-level if/try/with blocks too."""
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, ast.If | ast.With):
            todo[:0] = [*node.body, *getattr(node, "orelse", [])]
        elif isinstance(node, ast.Try):
            todo[:0] = [
                *node.body,
                *[s for h in node.handlers for s in h.body],
                *node.orelse,
                *node.finalbody,
            ]


def _targets(node: ast.stmt) -> list[str]:
    out: list[str] = []
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    for t in targets:
        out += [e.id for e in ([t] if not isinstance(t, ast.Tuple) else t.elts) if isinstance(e, ast.Name)]
    return out


def module_names(tree: ast.Module) -> dict[str, ast.AST]:
    """What a module defines or imports at its top level (name -> the node)."""
    names: dict[str, ast.AST] = {}
    for node in _top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = node
        else:
            for name in _targets(node):
                names[name] = node
    if "__getattr__" in names:  # a lazy module (ultralytics' own YOLO): the names it hands out by string
        for node in _top_level(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                for c in ast.walk(node.value):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.isidentifier():
                        names.setdefault(c.value, node)
    return names


def _imported_from(node: ast.AST, name: str, module: str) -> str | None:
    """The module an `import`/`from ... import` statement takes `name` from."""
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = module.split(".")[: -node.level] if module else []
            base = ".".join([*parts, node.module] if node.module else parts)
        else:
            base = node.module or ""
        if base == "ultralytics" or base.startswith("ultralytics."):
            return base.removeprefix("ultralytics").lstrip(".")
        if node.level:
            return base
    return None


@dataclass
class ClassInfo:
    """A class with its Ultralytics bases (nearest first), each as (module, ClassDef)."""

    chain: list[tuple[str, ast.ClassDef]] = field(default_factory=list)

    def method(self, name: str) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        for module, cls in self.chain:
            for node in cls.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
                    return module, node
        return None

    def has_attribute(self, name: str) -> bool:
        for _, cls in self.chain:
            for node in cls.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if node.name == name:
                        return True
                elif name in _targets(node):
                    return True
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and name in _self_assigned(fn):
                    return True
        return False


@functools.cache
def _self_assigned(fn: ast.AST) -> frozenset[str]:
    """The attributes a method assigns on self (`self.x = `, `self.a, self.b = `, setattr)."""
    found: set[str] = set()
    for node in ast.walk(fn):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func) in {"setattr", "object.__setattr__"}
            and len(node.args) >= 2
            and _dotted(node.args[0]) == "self"
        ):
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.add(key.value)
        for t in targets:
            for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(e, ast.Attribute) and _dotted(e.value) == "self":
                    found.add(e.attr)
    return frozenset(found)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def find_class(src: Source, module: str, name: str, depth: int = 0) -> ClassInfo | None:
    tree = src.tree(module)
    if tree is None or depth > 12:
        return None
    node = module_names(tree).get(name)
    if isinstance(node, ast.ClassDef):
        info = ClassInfo([(module, node)])
        for base in node.bases:
            dotted = _dotted(base)
            if not dotted or "." in dotted:
                continue
            found = find_class(src, *_where(src, module, dotted), depth + 1)
            if found is not None:
                info.chain += found.chain
        return info
    if node is not None:
        source = _imported_from(node, name, module)
        if source is not None:
            return find_class(src, source, name, depth + 1)
    return None


def _where(src: Source, module: str, name: str) -> tuple[str, str]:
    """(module, name) of a name used in `module`: its own, or where it imports it from."""
    tree = src.tree(module)
    node = module_names(tree).get(name) if tree is not None else None
    if node is not None and not isinstance(node, ast.ClassDef):
        source = _imported_from(node, name, module)
        if source is not None:
            alias = next((a for a in getattr(node, "names", []) if (a.asname or a.name) == name), None)
            return source, alias.name if alias is not None else name
    return module, name


def _function(src: Source, module: str, dotted: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """A module's function ("build_dataloader") or a class's method ("BaseTrainer._do_train")."""
    tree = src.tree(module)
    if tree is None:
        return None
    head, _, method = dotted.partition(".")
    if method:
        info = find_class(src, module, head)
        found = info.method(method) if info is not None else None
        return found[1] if found is not None else None
    node = module_names(tree).get(head)
    return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None


# ---- signatures -----------------------------------------------------------------------------------


def _signature_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> inspect.Signature:
    a = fn.args
    params: list[inspect.Parameter] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = _PARAM_KINDS.POSITIONAL_ONLY if i < len(a.posonlyargs) else _PARAM_KINDS.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(arg.arg, kind, default=... if default is not None else _EMPTY))
    if a.vararg:
        params.append(inspect.Parameter(a.vararg.arg, _PARAM_KINDS.VAR_POSITIONAL))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append(
            inspect.Parameter(
                arg.arg, _PARAM_KINDS.KEYWORD_ONLY, default=... if kw_default is not None else _EMPTY
            )
        )
    if a.kwarg:
        params.append(inspect.Parameter(a.kwarg.arg, _PARAM_KINDS.VAR_KEYWORD))
    static = any(_dotted(d) == "staticmethod" for d in fn.decorator_list)
    if drop_first and params and not static:
        params = params[1:]
    return inspect.Signature(params)


_EMPTY = inspect.Parameter.empty


def _declared(method: Any, drop_first: bool) -> inspect.Signature:
    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    if drop_first and params and params[0].name == "self":
        params = params[1:]
    return sig.replace(parameters=params)


def accepts(real: inspect.Signature, declared: inspect.Signature) -> str | None:
    """Why a call made as `declared` says (positional-only parameters by position, the rest by
    keyword; `*args`/`**kwargs`: anything) does not bind to `real`; None when it does."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in declared.parameters.values():
        if p.kind is _PARAM_KINDS.POSITIONAL_ONLY:
            args.append(p.name)
        elif p.kind in (_PARAM_KINDS.POSITIONAL_OR_KEYWORD, _PARAM_KINDS.KEYWORD_ONLY):
            kwargs[p.name] = p.name
    try:
        real.bind(*args, **kwargs)
    except TypeError as e:
        return f"takes {_render(real)}, rig passes {_render(declared)}: {e}"
    return None


def same_parameters(real: inspect.Signature, declared: inspect.Signature) -> str | None:
    """For a method rig overrides: Ultralytics calls rig's override as it calls its own, so each of
    its parameters must be the contract's (and rig's override's), in the same place and kind, with a
    default wherever Ultralytics' has one; `*args`/`**kwargs` in the contract take anything."""
    if any(
        p.kind in (_PARAM_KINDS.VAR_POSITIONAL, _PARAM_KINDS.VAR_KEYWORD)
        for p in declared.parameters.values()
    ):
        return None
    ours = list(declared.parameters.values())
    theirs = list(real.parameters.values())
    fits = len(ours) == len(theirs) and all(
        a.name == b.name
        and (a.kind is _PARAM_KINDS.KEYWORD_ONLY) == (b.kind is _PARAM_KINDS.KEYWORD_ONLY)
        and (b.default is _EMPTY or a.default is not _EMPTY)
        for a, b in zip(ours, theirs, strict=True)
    )
    return None if fits else f"takes {_render(real)}; rig's override takes {_render(declared)}"


def _render(sig: inspect.Signature) -> str:
    return str(sig).replace("=Ellipsis", "=...")


# ---- the check ------------------------------------------------------------------------------------


def _members(proto: type) -> Iterator[tuple[str, Any, tuple[Any, ...], type]]:
    """(name, declared thing, its tags, the Protocol that declares it) of a Protocol and its bases:
    annotations (an attribute) and functions (a method)."""
    hints = typing.get_type_hints(proto, include_extras=True)
    seen: set[str] = set()
    for klass in proto.__mro__:
        if klass is object or klass is typing.Protocol or klass.__module__ != contract.__name__:
            continue
        for name in getattr(klass, "__annotations__", {}):
            if name not in seen:
                seen.add(name)
                yield name, hints.get(name), tuple(getattr(hints.get(name), "__metadata__", ())), klass
        for name, value in vars(klass).items():
            fn = value.__func__ if isinstance(value, staticmethod) else value
            if callable(fn) and hasattr(fn, "__rig_needs__") and name not in seen:
                seen.add(name)
                yield name, value, tuple(fn.__rig_needs__), klass


def _features(tags: Sequence[Any]) -> list[Feature]:
    return [t for t in tags if isinstance(t, Feature)] or [contract.CORE]


def _uses(tags: Sequence[Any], kind: str) -> list[Use]:
    return [t for t in tags if isinstance(t, Use) and t.kind == kind]


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """What a function runs: its body's nodes (its annotations are never evaluated: Ultralytics
    writes `from __future__ import annotations`)."""
    return [n for stmt in fn.body for n in ast.walk(stmt)]


def _reads_global(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    names = [n for n in _body(fn) if isinstance(n, ast.Name) and n.id == name]
    stored = any(isinstance(n.ctx, ast.Store) for n in names)
    return any(isinstance(n.ctx, ast.Load) for n in names) and not stored


def _makes_call(fn: ast.FunctionDef | ast.AsyncFunctionDef, call: str) -> bool:
    return any(isinstance(n, ast.Call) and _dotted(n.func) == call for n in _body(fn))


def _strings(node: ast.AST) -> set[str]:
    """Keys a piece of source makes: string constants, and the keywords of dict(...) calls."""
    found: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.add(n.value)
        elif isinstance(n, ast.Call) and _dotted(n.func) == "dict":
            found.update(k.arg for k in n.keywords if k.arg)
    return found


class _Checker:
    def __init__(self, src: Source) -> None:
        self.src = src
        self.missing: list[Missing] = []

    def lack(self, tags: Sequence[Any], name: str, why: str) -> None:
        for feature in _features(tags):
            self.missing.append(Missing(feature.key, name, why))

    # modules
    def module(self, proto: type, module: str, optional: bool = False) -> None:
        tree = self.src.tree(module)
        label = f"ultralytics.{module}" if module else "ultralytics"
        if tree is None:
            if not optional:
                for _name, _thing, tags, _ in _members(proto):
                    self.lack(tags, label, "no such module")
            return
        defined = module_names(tree)
        for name, thing, tags, _ in _members(proto):
            where = f"{label}.{name}"
            swaps = _uses(tags, "swap")
            if swaps and swaps[0].within:
                fn = _function(self.src, module, swaps[0].within)
                if fn is None:
                    self.lack(tags, f"{label}.{swaps[0].within}", f"not found (rig swaps {name} for it)")
                elif not _reads_global(fn, name):
                    self.lack(
                        tags, where, f"{swaps[0].within} no longer reads it, so rig's swap would do nothing"
                    )
                continue
            if name not in defined:
                self.lack(tags, where, "not found")
                continue
            if callable(thing) and hasattr(thing, "__rig_needs__"):
                node = defined[name]
                self.callable_at(tags, where, module, name, node, thing)

    def callable_at(
        self, tags: Sequence[Any], where: str, module: str, name: str, node: ast.AST, thing: Any
    ) -> None:
        """A module function or class rig calls: its signature (a class: its __init__)."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            real = _signature_of(node, drop_first=False)
        else:
            origin = (module, name)
            if not isinstance(node, ast.ClassDef):
                source = _imported_from(node, name, module)
                origin = (source, name) if source is not None else origin
            info = find_class(self.src, *origin)
            init = info.method("__init__") if info is not None else None
            if init is None:
                return  # a lazy or foreign class (the package's YOLO): its presence is what is checked
            real = _signature_of(init[1], drop_first=True)
        why = accepts(real, _declared(thing, drop_first=True))
        if why:
            self.lack(tags, where, why)

    # classes
    def klass(self, proto: type, located: str) -> None:
        module, _, name = located.partition(":")
        info = find_class(self.src, module, name)
        label = f"ultralytics.{module}.{name}"
        if info is None:
            for _n, _t, tags, _ in _members(proto):
                self.lack(tags, label, "no such class")
            return
        for member, thing, tags, owner in _members(proto):
            if owner in contract.TORCH:
                continue  # torch's own (nn.Module, DataLoader): the image pins torch
            where = f"{label}.{member}"
            if callable(thing) and hasattr(getattr(thing, "__func__", thing), "__rig_needs__"):
                found = info.method(member)
                if found is None:
                    self.lack(tags, where, "no such method")
                    continue
                real = _signature_of(found[1], drop_first=True)
                declared = _declared(
                    getattr(thing, "__func__", thing), drop_first=not isinstance(thing, staticmethod)
                )
                why = (same_parameters if _uses(tags, "override") else accepts)(real, declared)
                if why:
                    self.lack(tags, where, why)
                for use in _uses(tags, "calls"):
                    if not _makes_call(found[1], use.within):
                        self.lack(tags, where, f"no longer calls {use.within}, which rig relies on")
            elif not _uses(tags, "sets") and not info.has_attribute(member):
                self.lack(tags, where, "no such attribute")

    # keys
    def keys(self, proto: type, located: str) -> None:
        hints = typing.get_type_hints(proto, include_extras=True)
        if located == "cfg":
            text = self.src.text("cfg/default.yaml") or ""
            made = set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*):", text, re.MULTILINE))
            label = "ultralytics/cfg/default.yaml"
        else:
            module, _, dotted = located.partition(":")
            label = f"ultralytics.{module}.{dotted}"
            made = self._made_in(module, dotted)
        for key, hint in hints.items():
            if key not in made:
                self.lack(getattr(hint, "__metadata__", ()), f"{label}: key {key!r}", "not made there")

    def _made_in(self, module: str, dotted: str) -> set[str]:
        head, _, method = dotted.partition(".")
        info = find_class(self.src, module, head)
        if info is not None and not method:
            return set().union(*(_strings(cls) for _, cls in info.chain))
        fn = _function(self.src, module, dotted)
        if fn is not None:
            return _strings(fn)
        tree = self.src.tree(module)
        node = module_names(tree).get(head) if tree is not None else None
        return _strings(node) if node is not None else set()

    def events(self) -> None:
        module, _, name = contract.EVENTS_AT.partition(":")
        made = self._made_in(module, name)
        for event, features in contract.EVENTS.items():
            if event not in made:
                self.lack(features, f"callback event {event!r}", f"not in ultralytics.{module}.{name}")


def check(package_dir: Path, version: str | None = None) -> Report:
    """The contract checked against the Ultralytics package in `package_dir` (its `ultralytics/`)."""
    src = Source(package_dir)
    c = _Checker(src)
    for proto, module in contract.MODULES.items():
        c.module(proto, module)
    for module in contract.TASK_VALIDATORS:
        c.module(contract.TaskValidator, module.removeprefix("ultralytics."), optional=True)
    for proto, located in contract.CLASSES.items():
        c.klass(proto, located)
    for proto, located in contract.KEYS.items():
        c.keys(proto, located)
    c.events()
    found = version if version is not None else read_version(src)
    unique = tuple(dict.fromkeys(c.missing))
    return Report(found, str(package_dir), unique, tuple(sorted(src.read)))


def read_version(src: Source) -> str:
    text = src.text("__init__.py") or ""
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    return m.group(1) if m else ""


# ---- the baked report -----------------------------------------------------------------------------


def digest(package_dir: Path, files: Sequence[str]) -> str | None:
    """The files' and the contract's digest; None when one of the files is gone."""
    h = hashlib.blake2b(digest_size=16)
    h.update(Path(contract.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    for rel in files:
        try:
            h.update(rel.encode() + b"\0" + (package_dir / rel).read_bytes())
        except OSError:
            return None
    return h.hexdigest()


def _to_json(report: Report, package_dir: Path) -> dict[str, Any]:
    return {"digest": digest(package_dir, report.files), "report": asdict(report)}


def _from_json(data: Mapping[str, Any]) -> Report:
    r = data["report"]
    return Report(
        str(r["version"]),
        str(r["location"]),
        tuple(Missing(**m) for m in r["missing"]),
        tuple(r["files"]),
    )


def installed_report(package_dir: Path, baked: Path | None = None) -> Report:
    """The contract checked against the installed Ultralytics: the baked report (BAKED) when its files
    and rig's contract are the ones baked (the image's own), else read now (about 0.3 s)."""
    try:
        data = json.loads((baked or BAKED).read_text())
        report = _from_json(data)
        if report.location == str(package_dir) and digest(package_dir, report.files) == data["digest"]:
            return report
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return check(package_dir)


@program.entry("contract")
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rig.yolo.contractcheck", description=__doc__)
    p.add_argument(
        "package", nargs="?", type=Path, help="an ultralytics/ folder (default: the installed one)"
    )
    p.add_argument("--bake", type=Path, help="write the report for the image to this file")
    a = p.parse_args(argv)
    package = a.package
    if package is None:
        from rig.yolo import ultra

        dirs = ultra.package_dirs()
        if not dirs:
            raise RigError("Ultralytics is not installed here", 2)
        package = dirs[0]
    report = check(package)
    if a.bake is not None:
        a.bake.write_text(json.dumps(_to_json(report, package), indent=1) + "\n")
        os.chmod(a.bake, 0o644)
    for m in report.missing:
        print(f"{m.feature}: {m.describe()}")
    count = len(report.missing)
    print(f"INFO contract: Ultralytics {report.version} at {report.location}: {count} names missing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
