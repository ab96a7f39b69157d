"""`python -m rig.workstation.piprun PREFIX PIP_DIR ARGS...`: the image's pip, for the user's prefix.

pip removes an installed package (to upgrade or uninstall it) only when it lies in "this
environment", which inside a venv means under sys.prefix, /opt/venv here: it would leave a user's
old versions in ~/.local behind and try to delete the image's read-only files instead. Run by
rig's gate (rig.workstation.pipgate), this makes PREFIX the environment pip manages: the user's
packages upgrade and uninstall as usual, and the image's are never removed, only shadowed, and only
when the user says so (RIG_PIP_UNPINNED). The names patched are those of the pip the image ships
(Debian's 23.0.1, /opt/rig/pip); tests/image/test_userbox.py uninstalls and shadows through it.
"""

from __future__ import annotations

import importlib
import os
import sys

from rig import program


@program.entry("pip")
def main(argv: list[str]) -> int:
    prefix, pip_dir, *args = argv
    sys.path.insert(0, pip_dir)
    # Imported by name: the image's pip is not on the host where mypy checks this.
    misc = importlib.import_module("pip._internal.utils.misc")
    modules = [
        misc,
        *map(importlib.import_module, ("pip._internal.metadata.base", "pip._internal.req.req_uninstall")),
    ]
    root = str(misc.normalize_path(prefix))

    def is_local(path: str) -> bool:
        return str(misc.normalize_path(path)).startswith(root + os.sep)

    for module in modules:
        setattr(module, "is_local", is_local)  # noqa: B010
    pip_main = importlib.import_module("pip._internal.cli.main").main
    sys.argv[0] = "pip"  # its messages say `pip install ...`
    code: int = pip_main(args)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
