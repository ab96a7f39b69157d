"""The files of the image that no package installed as they are, added to its SBOM with their SHA-256.

Usage: sbom_files.py --root / [--site-packages DIR]... SBOM.cdx.json > SBOM-WITH-FILES.cdx.json

A regular file is a package's when a Debian package lists it (/var/lib/dpkg/info/*.list) with the
MD5 dpkg recorded (md5sums, or the conffile's in dpkg's status), or a Python distribution lists it
in its RECORD with the same SHA-256 (or it is the bytecode of such a file, compiled at install).
Every other regular file is a CycloneDX component of type `file`, named by its path, with its
SHA-256 and how it stands: `unpackaged` (no package lists it: rig's configs, the Python headers
copied from the build, /usr/local/bin/pip, generated files such as /etc/passwd) or `changed`
(listed, with other contents: a config the image replaces). Pseudo-filesystems and scratch folders
(/proc, /sys, /dev, /run, /tmp, /var/tmp, /var/cache, /var/log) and dpkg's and apt's own databases are
not described; links are not followed and not described (their targets are). Standard library only:
it runs at build time with the image's own Python, on the image's own tree.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SKIPPED = (
    "proc",
    "sys",
    "dev",
    "run",
    "tmp",
    "var/tmp",
    "var/cache",
    "var/log",
    "var/lib/dpkg",
    "var/lib/apt",
)
CHUNK = 1 << 20


@dataclass(frozen=True)
class Owned:
    """What packages say of a path: its digest, the algorithm, and whose it is."""

    algorithm: str  # "md5" (dpkg) or "sha256" (a RECORD, urlsafe base64 without padding)
    digest: str  # "" where the package lists the path without a digest
    owner: str  # "deb NAME" or "pypi NAME"


class Resolver:
    """A listed path as the tree holds it: dpkg lists /lib/x86_64-linux-gnu/libc.so.6 where a merged
    /usr has it at /usr/lib/... (/lib is a link). Each listed folder is resolved once, inside root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        folder, _, name = path.rpartition("/")
        if folder not in self.folders:
            real = os.path.realpath(self.root / folder.lstrip("/"))
            inside = os.path.relpath(real, self.root)
            self.folders[folder] = folder if inside.startswith("..") else "/" + inside.removeprefix(".")
        return f"{self.folders[folder].rstrip('/')}/{name}"


def dpkg_owned(root: Path) -> dict[str, Owned]:
    """Every file a Debian package lists, with the MD5 dpkg recorded for it, under the path it has
    in the tree (the folders' links resolved)."""
    info = root / "var/lib/dpkg/info"
    owned: dict[str, Owned] = {}
    real = Resolver(root)
    for listing in sorted(info.glob("*.list")):
        package = listing.name[: -len(".list")].split(":", 1)[0]
        for line in listing.read_text(errors="surrogateescape").splitlines():
            if line and line != "/.":
                owned[real(line)] = Owned("md5", "", f"deb {package}")
        sums = listing.with_suffix(".md5sums")
        if sums.exists():
            for line in sums.read_text(errors="surrogateescape").splitlines():
                digest, _, path = line.partition("  ")
                if path:
                    owned[real("/" + path)] = Owned("md5", digest, f"deb {package}")
    status = root / "var/lib/dpkg/status"
    package = ""
    for line in status.read_text(errors="surrogateescape").splitlines() if status.exists() else ():
        if line.startswith("Package: "):
            package = line[9:].strip()
        elif line.startswith(" /") and len(fields := line.split()) >= 2:
            owned[real(fields[0])] = Owned(
                "md5", fields[1], f"deb {package}"
            )  # a conffile: its MD5 at install
    return owned


def record_owned(site_packages: Path, root: Path) -> dict[str, Owned]:
    """Every file a distribution's RECORD lists, with its SHA-256; paths as the image sees them."""
    owned: dict[str, Owned] = {}
    for record in sorted(site_packages.glob("*.dist-info/RECORD")):
        name = record.parent.name.split("-", 1)[0]
        with record.open(newline="", errors="surrogateescape") as f:
            for row in csv.reader(f):
                if not row:
                    continue
                path = os.path.normpath(site_packages / row[0])
                algorithm, _, digest = (row[1] if len(row) > 1 else "").partition("=")
                image_path = "/" + os.path.relpath(path, root)
                owned[image_path] = Owned("sha256", digest if algorithm == "sha256" else "", f"pypi {name}")
    return owned


def walk(root: Path) -> Iterator[Path]:
    """The regular files under root, links not followed, the skipped folders left out."""
    skipped = {root / s for s in SKIPPED}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if here / d not in skipped)
        for name in sorted(files):
            path = here / name
            if stat.S_ISREG(path.lstat().st_mode):
                yield path


def digest(path: Path, algorithm: str) -> str:
    """The file's digest: hex, or for "record" SHA-256 as a RECORD writes it (urlsafe base64)."""
    h = hashlib.md5(usedforsecurity=False) if algorithm == "md5" else hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return (
        base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() if algorithm == "record" else h.hexdigest()
    )


def bytecode_source(path: str) -> str | None:
    """The source a __pycache__/NAME.TAG.pyc was compiled from, else None."""
    parent, _, name = path.rpartition("/")
    if not (parent.endswith("/__pycache__") and name.endswith(".pyc")):
        return None
    return f"{parent[: -len('/__pycache__')]}/{name.split('.', 1)[0]}.py"


def verdict(path: str, path_digest: Callable[[str], str], owned: dict[str, Owned]) -> str | None:
    """None: a package installed this file as it is; else "unpackaged" or "changed (OWNER)".
    `path_digest(algorithm)` hashes the file, only when a package's digest is there to compare."""
    entry = owned.get(path)
    if entry is None:
        source = bytecode_source(path)
        return None if source is not None and source in owned else "unpackaged"
    if not entry.digest:
        return None  # listed without a digest (RECORD's own line, the bytecode it lists)
    mine = path_digest("md5" if entry.algorithm == "md5" else "record")
    return None if mine == entry.digest else f"changed ({entry.owner})"


def census(root: Path, files: Iterable[Path], owned: dict[str, Owned]) -> list[dict[str, Any]]:
    components = []
    for path in files:
        image_path = "/" + path.relative_to(root).as_posix()
        if (how := verdict(image_path, lambda algorithm, p=path: digest(p, algorithm), owned)) is None:
            continue
        components.append(
            {
                "bom-ref": f"file:{image_path}",
                "type": "file",
                "name": image_path,
                "hashes": [{"alg": "SHA-256", "content": digest(path, "sha256")}],
                "properties": [{"name": "yolo-rig:origin", "value": how}],
            }
        )
    return components


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/"))
    parser.add_argument("--site-packages", type=Path, action="append", default=[])
    parser.add_argument("sbom", type=Path)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    owned = dpkg_owned(root)
    for site_packages in args.site_packages:
        owned.update(record_owned(site_packages, root))
    bom = json.loads(args.sbom.read_text())
    bom.setdefault("components", []).extend(census(root, walk(root), owned))
    json.dump(bom, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
