"""What the image's Python does at every start: a guard on sys.meta_path for `import ultralytics`.

docker/yolo-rig.pth, in the image's site-packages, runs `install` whenever /opt/venv/bin/python
starts (python, `yolo`, notebook kernels, `rig train`'s ranks, `python -I` too). Before the first
`import ultralytics` of a process, the guard lets rig.yolo.other_settings choose the settings folder
that Ultralytics will use (YOLO_CONFIG_DIR), then steps aside: Python's own finders import the module.
It costs every start only this module (os and sys are already loaded); the rest loads with Ultralytics.
Not for root, whose processes never import a user's packages.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # mypy reads the name as typing's; `typing` itself would cost every start
if TYPE_CHECKING:
    from typing import Any

MODULE = "ultralytics"


class Guard:
    """Looks at the first `import ultralytics` of the process; passes every other import on. It stays
    on sys.meta_path: the import system is iterating over that list when it asks."""

    def __init__(self) -> None:
        self.done = False

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname != MODULE or path is not None or self.done:
            return None
        self.done = True
        try:
            from rig.yolo import other_settings

            line = other_settings.prepare(os.environ, sys.path)
        except Exception as e:  # never break the user's import; say that their file is unguarded
            line = f"WARNING settings: could not keep your Ultralytics settings from this Ultralytics ({e!r})"
        if line:
            print(line, file=sys.stderr)
        return None


def install(meta_path: list[Any] | None = None, euid: int | None = None) -> None:
    """Put a Guard first on meta_path (sys.meta_path), once; not for root."""
    finders: list[Any] = sys.meta_path if meta_path is None else meta_path
    if (os.geteuid() if euid is None else euid) == 0 or any(isinstance(f, Guard) for f in finders):
        return
    finders.insert(0, Guard())
