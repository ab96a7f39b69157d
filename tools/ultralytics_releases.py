"""Ultralytics releases on the host, without installing them: the locked wheel (uv.lock's URL and
SHA-256) or any release (PyPI's simple index and the SHA-256 it gives), downloaded once into
build/ultralytics/VERSION/ and unpacked there.

The contract check (rig.yolo.contractcheck) reads a package's source, never imports it: the host
tests check rig's list against the real files of the image's Ultralytics and of the tested window's
oldest release, `make test-ultralytics` installs a release's wheel into the image, and

    python tools/ultralytics_releases.py 8.3.253 8.4.100 8.4.158 8.4.190

prints, for each release, what rig turns off with it (docs/ultralytics.md's table).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "build" / "ultralytics"
LOCKED = "ultralytics-opencv-headless"
INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def locked_version() -> str:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    (package,) = [p for p in lock["package"] if p["name"] == LOCKED]
    return str(package["version"])


def _locked_wheel(dest: Path) -> Path:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    (package,) = [p for p in lock["package"] if p["name"] == LOCKED]
    (wheel,) = package["wheels"]
    algorithm, want = wheel["hash"].split(":", 1)
    assert algorithm == "sha256", wheel["hash"]
    return _download(wheel["url"], dest / wheel["url"].rsplit("/", 1)[1], want)


def _download(url: str, path: Path, sha256: str) -> Path:
    if not path.is_file():
        tmp = path.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=120) as r, tmp.open("wb") as out:
            shutil.copyfileobj(r, out)
        tmp.rename(path)
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    assert got == sha256, f"{path}: sha256 {got}, the index says {sha256}"
    return path


def _any_wheel(version: str, dest: Path, dist: str = "ultralytics") -> Path:
    """A release's wheel from PyPI's simple index (PEP 691), checked against the SHA-256 it gives."""
    name = f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    request = urllib.request.Request(f"{INDEX}/{dist}/", headers={"Accept": SIMPLE_JSON})
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    (wheel,) = [f for f in files if f["filename"] == name]
    return _download(wheel["url"], dest / name, wheel["hashes"]["sha256"])


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    dest.mkdir(parents=True, exist_ok=True)
    with (dest / ".lock").open("w") as f:  # two test workers ask at once
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def wheel(version: str | None = None, dist: str = "ultralytics") -> Path:
    """A release's wheel (None: the image's, as uv.lock pins it), downloaded once and checked: plain
    `ultralytics`, or the image's `ultralytics-opencv-headless` (the same module, without the
    desktop OpenCV)."""
    version = version or locked_version()
    dest = CACHE / version
    with _locked(dest):
        if version == locked_version() and dist == LOCKED:
            return _locked_wheel(dest)
        return _any_wheel(version, dest, dist)


def source(version: str | None = None) -> Path:
    """The `ultralytics/` folder of a release (None: the image's, as uv.lock pins it)."""
    version = version or locked_version()
    dest = CACHE / version
    package = dest / "ultralytics"
    if not (package / "__init__.py").is_file():
        found = wheel(version, LOCKED if version == locked_version() else "ultralytics")
        with _locked(dest), zipfile.ZipFile(found) as z:
            if not (package / "__init__.py").is_file():
                z.extractall(dest, [n for n in z.namelist() if n.startswith("ultralytics/")])
    return package


def copy_of(version: str | None, into: Path) -> Path:
    """A copy of a release's `ultralytics/` folder to change (its .py files and cfg/default.yaml)."""
    target = into / "ultralytics"
    shutil.copytree(source(version), target, ignore=shutil.ignore_patterns("assets", "*.png", "*.jpg"))
    return target


def table(versions: list[str]) -> str:
    """A markdown table: each release, what rig does with it, and what its names leave off (the
    contract's features whose names it lacks)."""
    from rig.yolo import contract, contractcheck, ultracheck

    rows = ["| Ultralytics | rig with it | features its names leave off |", "| --- | --- | --- |"]
    for version in versions:
        report = contractcheck.check(source(version))
        verdict = ultracheck.decide(report, locked_version())
        off = ", ".join(
            f"{f.title} ({m.name.removeprefix('ultralytics.')})"
            for f in report.off()
            if (m := report.first_missing(f)) is not None
        )
        if verdict.error is None:
            said = "untested, trains" if verdict.warnings and not off else "trains"
        elif report.first_missing(contract.CORE) is not None:
            said = "refused: lacks what rig cannot train without"
        else:
            said = "refused: older than the tested window"
        label = version + (" (the window's oldest)" if version == contract.WINDOW.oldest else "")
        label += " (the image's pin)" if version == locked_version() else ""
        rows.append(f"| {label} | {said} | {off or 'none'} |")
    return "\n".join(rows)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(REPO / "entrypoint"))
    print(table(sys.argv[1:] or [locked_version()]))
