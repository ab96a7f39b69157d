"""Ultralytics' settings under another Ultralytics: the user's own file is never reset.

Each Ultralytics checks settings.json against its own schema when it is imported
(`ultralytics.utils.SettingsManager`): a file with other keys, other types or another
`settings_version` is reset to its stock defaults (8.4.114 and older, with a WARNING) or rewritten in
its schema (later ones). The image's settings are the user's (rig.yolo.settings); the first import of
an older Ultralytics installed in ~/.local (`RIG_PIP_UNPINNED=1 pip install ...`) would reset them,
and the image's Ultralytics would start from stock afterwards.

So the image's Python puts a guard first on sys.meta_path at every start (rig.yolo.import_guard),
which calls `prepare` before the first `import ultralytics` of a process. When a process (python,
`yolo`, a notebook kernel, `rig train`'s ranks) imports `ultralytics` from anywhere but the image's
site-packages, and that Ultralytics' schema, read from its source (not imported), would not take
the user's file as it is, YOLO_CONFIG_DIR of that process and its children becomes a folder of
that schema beside the user's settings: `<config>/Ultralytics-schema-<version>/Ultralytics/`. It
is seeded with the user's values of the keys the schema shares and the schema's defaults for the
rest, and again whenever the user's file is newer; one INFO line says so each time. The user's file
stays as it is, for the image's Ultralytics and for any other of its schema.
"""

from __future__ import annotations

import ast
import json
import os
import sysconfig
from collections.abc import MutableMapping, Sequence
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any, NamedTuple

from rig import origins, safefs
from rig.yolo import settings

MODULE = "ultralytics"
DERIVED = "Ultralytics-schema-"  # <config>/Ultralytics-schema-0.0.6: a schema's own YOLO_CONFIG_DIR
# The image's packages: its Python's own site-packages (/opt/venv/lib/python3.11/site-packages).
IMAGE_SITE = sysconfig.get_path("purelib")
_NO_DEFAULT = object()  # a default computed at run time (a path, a hash): only its type is known


class Schema(NamedTuple):
    version: str  # SettingsManager's `version` (settings_version in the file)
    defaults: dict[str, tuple[type | None, Any]]  # key -> (its type or None: unknown, default or _NO_DEFAULT)


def prepare(environ: MutableMapping[str, str], path: Sequence[str], image_site: str = IMAGE_SITE) -> str:
    """Set environ's YOLO_CONFIG_DIR for the Ultralytics `import ultralytics` finds on `path`; the
    line to print ("" for none)."""
    spec = PathFinder.find_spec(MODULE, list(path))
    package = _package(spec)
    if package is None:
        return ""
    config = environ.get(settings.VARIABLE, "")
    base = Path(config).expanduser() if config else Path.home() / ".config"
    if base.name.startswith(DERIVED):  # a parent process chose it: the user's folder is the one above
        base = base.parent
    theirs = _decide(package, base, image_site)
    if theirs is None:
        if config and Path(config).name.startswith(DERIVED):
            environ[settings.VARIABLE] = str(base)
        return ""
    folder, line = theirs
    environ[settings.VARIABLE] = str(folder)
    return line


def _package(spec: ModuleSpec | None) -> Path | None:
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _decide(package: Path, base: Path, image_site: str) -> tuple[Path, str] | None:
    """(YOLO_CONFIG_DIR, the line to print) for the Ultralytics in `package`; None where the user's
    own folder is right: the image's Ultralytics, one whose schema takes the user's file, no file."""
    if os.path.realpath(package.parent) == os.path.realpath(image_site):
        return None
    if not (package / "utils" / "__init__.py").is_file():
        return None  # a package of that name that keeps no settings where Ultralytics does
    mine = base / settings.SUBDIR / settings.FILE
    try:
        user = json.loads(safefs.read_input(mine, settings.MAX_SETTINGS_BYTES))
    except (OSError, ValueError, safefs.Skipped):
        return None  # nothing to keep (Ultralytics creates it), or nothing it could read either
    if not isinstance(user, dict):
        return None
    schema = read_schema(package)
    if schema is not None and fits(user, schema):
        return None
    version = schema.version if schema is not None else "unknown"
    folder = base / f"{DERIVED}{version}"
    theirs = folder / settings.SUBDIR / settings.FILE
    try:
        if theirs.stat().st_mtime >= mine.stat().st_mtime:
            return folder, ""  # seeded since the user's last change; its own changes since are its own
    except OSError:
        pass
    try:
        previous = json.loads(safefs.read_input(theirs, settings.MAX_SETTINGS_BYTES))
    except (OSError, ValueError, safefs.Skipped):
        previous = {}
    seeded = translate(user, schema, previous if isinstance(previous, dict) else {})
    release = origins.source_version(str(package / "__init__.py")) or "of unknown version"
    said = f"Ultralytics {release} ({package}) reads settings schema {version}, not yours ({mine})"
    try:
        seed(folder, json.dumps(seeded, indent=2).encode(), mine.parent)
    except (OSError, safefs.Skipped) as e:
        return base, f"WARNING settings: {said}, and cannot have its own in {folder} ({e}): may reset yours"
    return folder, f"INFO settings: {said}: it uses {theirs}, seeded from yours, which it leaves as it is"


def read_schema(package: Path) -> Schema | None:
    """The settings schema of the Ultralytics in `package`, from its source (nothing imported):
    SettingsManager.__init__'s `version` default and the keys and defaults of `self.defaults`."""
    data = origins.read_regular(str(package / "utils" / "__init__.py"))
    if data is None:
        return None
    source = data.decode("utf-8", errors="replace")
    # The class alone parses in about 1 ms, the whole module in about 15: the class ends at the
    # next line that starts in column 0; where that cut it short (such a line in a docstring), the module.
    start = source.find("\nclass SettingsManager")
    if start < 0:
        return None
    end = source.find("\n", start + 1)
    while end >= 0 and end + 1 < len(source) and source[end + 1] in " \t\n#":
        end = source.find("\n", end + 1)
    for text in (source[start + 1 : end if end >= 0 else len(source)], source):
        try:
            schema = _schema(ast.parse(text))
        except SyntaxError:
            continue
        if schema is not None:
            return schema
    return None


def _schema(tree: ast.Module) -> Schema | None:
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SettingsManager"), None)
    if cls is None:
        return None
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return None
    args = init.args.args[len(init.args.args) - len(init.args.defaults) :]
    version = next(
        (d.value for a, d in zip(args, init.args.defaults, strict=True)
         if a.arg == "version" and isinstance(d, ast.Constant)),
        None,
    )  # fmt: skip
    if not isinstance(version, str):
        return None
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Attribute) and t.attr == "defaults" for t in node.targets)
        ):
            defaults = {}
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    defaults[key.value] = _default(value, version)
            return Schema(version, defaults)
    return None


def _default(node: ast.expr, version: str) -> tuple[type | None, Any]:
    if isinstance(node, ast.Constant):
        return type(node.value), node.value
    if isinstance(node, ast.Name) and node.id == "version":
        return str, version
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("str", "hexdigest"):
            return str, _NO_DEFAULT
    return None, _NO_DEFAULT


def _typed(value: object, kind: type | None) -> bool:
    return kind is None or isinstance(value, kind)


def fits(user: dict[str, Any], schema: Schema) -> bool:
    """Whether that Ultralytics takes the user's file as it is: its keys, their types, its version
    (what SettingsManager._validate_settings checks)."""
    return (
        set(user) == set(schema.defaults)
        and user.get("settings_version") == schema.version
        and all(_typed(user[k], kind) for k, (kind, _) in schema.defaults.items())
    )


def translate(user: dict[str, Any], schema: Schema | None, previous: dict[str, Any]) -> dict[str, Any]:
    """The settings for that schema: each key's value from the user's file, else from the schema's
    folder as it was (keys only it has: what that Ultralytics changed there), else its default. A
    key left without a value makes that Ultralytics reset its own file, never the user's. Without a
    schema (its source unreadable), the user's file as it is."""
    if schema is None:
        return dict(user)
    out: dict[str, Any] = {}
    for key, (kind, default) in schema.defaults.items():
        if key == "settings_version":
            out[key] = schema.version
        elif key in user and _typed(user[key], kind):
            out[key] = user[key]
        elif key in previous and _typed(previous[key], kind):
            out[key] = previous[key]
        elif default is not _NO_DEFAULT:
            out[key] = default
    return out


def seed(folder: Path, content: bytes, fonts: Path) -> None:
    """folder/Ultralytics/settings.json = content, and links to the fonts in `fonts` (the user's
    Ultralytics folder: Ultralytics would download them again) where missing. Never follows a link
    it finds in folder (rig.safefs); OSError or safefs.Skipped when it cannot."""
    with safefs.opened_dir(folder.parent) as parent_fd:
        config_fd = safefs.ensure_dir(folder.name, parent_fd)
        try:
            sub_fd = safefs.ensure_dir(settings.SUBDIR, config_fd)
            try:
                safefs.write_atomic(settings.FILE, content, sub_fd, mode=0o644)
                for font in sorted(fonts.glob("*.ttf")):
                    if safefs.describe(font.name, sub_fd) == "nothing":
                        target = os.readlink(font) if font.is_symlink() else str(font)
                        os.symlink(target, font.name, dir_fd=sub_fd)
            finally:
                os.close(sub_fd)
        finally:
            os.close(config_fd)
