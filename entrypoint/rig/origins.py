"""Which copy of a module a session imports, from where, and which distribution installed it.

A user may install another Ultralytics in ~/.local (`RIG_PIP_UNPINNED=1 pip install ...`): their
sessions, notebooks and `rig train`'s ranks then import it ahead of the image's, since ~/.local is
on their PYTHONPATH, while `rig` itself (isolated, `python -I`) still imports the image's. So this
looks the module up as the session would, without importing it (nor torch): Python's own path
finder on the session's path, then the `.dist-info` folder beside it whose `top_level.txt` (or
RECORD) claims it. The version is that folder's (the packaging spec fixes its name as
`{name}-{version}.dist-info`; importlib.metadata alone would cost `rig --version` about 50 ms), else
the module's own `__version__` line. Every file is read through `root`, so tests use fake trees.

Root's sessions never import a user's packages, so for root only the image's folders count
(`session_path`); and a file is read only when it is a regular file (not through a link, never
blocking on a FIFO) and small, whoever reads it.
"""

import os
import re
import stat
from collections.abc import Mapping, Sequence
from importlib.machinery import PathFinder
from typing import NamedTuple

_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


class Origin(NamedTuple):
    module: str
    path: str  # the package's folder (or the module's file), as the session sees it
    dist: str  # the distribution that installed it ("ultralytics-opencv-headless"); "" when none says so
    version: str  # that distribution's version, else the module's __version__; "unknown" without either

    def describe(self) -> str:
        by = f", {self.dist}" if self.dist else ""
        return f"{self.module} {self.version} ({self.path}{by})"


_MAX_BYTES = 4 << 20  # a RECORD of a large distribution is well under 1 MiB


def session_path(environ: Mapping[str, str], path: Sequence[str], euid: int | None = None) -> list[str]:
    """The folders a session's Python searches: its PYTHONPATH first, then `path` (the image's
    interpreter's own sys.path), without the current folder (`rig train`'s ranks leave it out).
    Root's: `path` alone (root's sessions never import a user's folders, and root reads none)."""
    found: list[str] = []
    own = os.geteuid() if euid is None else euid
    pythonpath = environ.get("PYTHONPATH", "") if own != 0 else ""
    for entry in [*pythonpath.split(":"), *path]:
        if entry and os.path.isabs(entry) and entry not in found:
            found.append(entry)
    return found


def image_path(environ: Mapping[str, str], path: Sequence[str]) -> list[str]:
    """The folders of the image's own Python: `path` less what PYTHONPATH added to it (`rig` runs
    isolated and has none; `python -m rig` in a session would)."""
    added = set(environ.get("PYTHONPATH", "").split(":"))
    return [p for p in path if p and os.path.isabs(p) and p not in added]


def _rooted(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root != "/" else path


def find(module: str, path: Sequence[str], root: str = "/") -> Origin | None:
    """`module` as `import module` finds it on `path` (absolute folders, read under `root`);
    None when no folder holds it."""
    spec = PathFinder.find_spec(module, [_rooted(root, p) for p in path])
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None
    locations = list(spec.submodule_search_locations or [])
    where = locations[0] if locations else str(spec.origin)
    folder = os.path.dirname(where)
    dist, version = _distribution(module, folder)
    if not version:
        version = source_version(str(spec.origin))
    shown = "/" + os.path.relpath(where, root) if root != "/" else where
    return Origin(module, shown, dist, version or "unknown")


def read_regular(path: str, max_bytes: int = _MAX_BYTES) -> bytes | None:
    """The file's bytes when it is a regular file of at most max_bytes, opened without following a
    link or waiting on a FIFO; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        return os.read(fd, max_bytes + 1)[:max_bytes]
    except OSError:
        return None
    finally:
        os.close(fd)


def _text(path: str) -> str:
    data = read_regular(path)
    return data.decode("utf-8", errors="replace") if data is not None else ""


def _claims(dist_info: str, module: str) -> bool:
    """Whether the .dist-info folder installed `module`: its top_level.txt, else its RECORD."""
    top_level = read_regular(os.path.join(dist_info, "top_level.txt"))
    if top_level is not None:
        return module in top_level.decode("utf-8", errors="replace").split()
    return _recorded_hash(dist_info, module) is not None


def _recorded_hash(dist_info: str, module: str) -> str | None:
    """The RECORD's hash of the module's first file (`module/__init__.py` or `module.py`); "" when
    RECORD lists it without one; None when it does not list it."""
    wanted = (f"{module}/__init__.py,", f"{module}.py,")
    for line in _text(os.path.join(dist_info, "RECORD")).splitlines():
        if line.startswith(wanted):
            return line.split(",")[1]
    return None


def _file_hash(folder: str, module: str) -> str:
    import base64
    import hashlib

    for name in (os.path.join(folder, module, "__init__.py"), os.path.join(folder, module + ".py")):
        data = read_regular(name)
        if data is not None:
            digest = hashlib.sha256(data).digest()
            return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return ""


def _distribution(module: str, folder: str) -> tuple[str, str]:
    """(name, version) of the distribution in `folder` that installed `module`; ("", "") when none
    claims it. Folders named like the module are read first (ultralytics, ultralytics_opencv_headless),
    every other one only when none of them claims it. Where two claim it (both installed into one
    prefix), the one whose RECORD matches the module's first file as it is on disk wins."""
    try:
        entries = sorted(e for e in os.listdir(folder) if e.endswith(".dist-info") and "-" in e)
    except OSError:
        return "", ""
    prefix = module.lower().replace("-", "_")
    likely = [e for e in entries if e.lower().startswith(prefix)]
    claimed = [e for e in likely if _claims(os.path.join(folder, e), module)]
    if not claimed:
        claimed = [e for e in entries if e not in likely and _claims(os.path.join(folder, e), module)]
    if len(claimed) > 1:
        on_disk = _file_hash(folder, module)
        matching = [e for e in claimed if _recorded_hash(os.path.join(folder, e), module) == on_disk]
        claimed = matching or claimed
    if not claimed:
        return "", ""
    name, _, version = claimed[0].removesuffix(".dist-info").partition("-")
    return name.replace("_", "-").lower(), version


def source_version(origin: str) -> str:
    """The `__version__ = "..."` line of the module's first file (a source checkout on PYTHONPATH
    has no .dist-info); "" when there is none."""
    m = _VERSION_LINE.search(_text(origin))
    return m.group(1) if m else ""
