"""What uv.lock says an image holds, computed from the lock alone, independently of the build:
the stack's headline versions (tools/lock_versions.py, which the labels come from) and every package
of the runtime in a marker environment."""

from __future__ import annotations

import re
import tomllib
from typing import Any

from tests.helpers import REPO


def locked_versions(stack: str) -> dict[str, str]:
    """The stack's locked packages (tools/lock_versions.py's answer, which the labels came from)."""
    from tools.lock_versions import stack_versions

    return stack_versions(REPO / "uv.lock", stack)


def locked_runtime(environment: dict[str, str], stack: str) -> dict[str, str]:
    """The packages uv.lock installs for yolo-rig's runtime dependencies and one stack (an extra) in
    this marker environment.

    Walks the lock from the project's main dependencies and the stack's extra (not its dev group),
    evaluating markers and extras the way an installer does, so the expectation is computed
    independently of the build. uv marks each fork's edges with the active extra
    (`extra == 'extra-8-yolo-rig-cu128'`), so the marker environment carries that one extra.
    """
    from packaging.markers import Marker

    lock = tomllib.loads((REPO / "uv.lock").read_text())
    by_key = {(p["name"], p["version"]): p for p in lock["package"]}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for p in lock["package"]:
        by_name.setdefault(p["name"], []).append(p)

    def applies(dep: dict[str, Any]) -> bool:
        return "marker" not in dep or Marker(dep["marker"]).evaluate(environment)

    def resolve(dep: dict[str, Any]) -> dict[str, Any]:
        if "version" in dep:
            return by_key[(dep["name"], dep["version"])]
        (only,) = by_name[dep["name"]]
        return only

    environment = {**environment, "extra": f"extra-{len('yolo-rig')}-yolo-rig-{stack}"}
    project = by_name["yolo-rig"][0]
    roots = project["dependencies"] + project["optional-dependencies"][stack]
    wanted: dict[str, str] = {}
    seen_extras: set[tuple[str, str]] = set()
    queue = [(d, d.get("extra", [])) for d in roots if applies(d)]
    while queue:
        dep, extras = queue.pop()
        package = resolve(dep)
        new_extras = [e for e in extras if (package["name"], e) not in seen_extras]
        if package["name"] in wanted and not new_extras:
            continue
        wanted[package["name"]] = package["version"]
        deps = list(package.get("dependencies", []))
        for extra in new_extras:
            seen_extras.add((package["name"], extra))
            deps += package.get("optional-dependencies", {}).get(extra, [])
        queue += [(d, d.get("extra", [])) for d in deps if applies(d)]
    return wanted


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
