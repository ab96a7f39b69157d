"""Files the lock pins, fetched by hash from their index for a test (the sdist's own tests, wheels).

uv.lock names every file's URL and sha256; a file is downloaded once into a cache folder and
checked against its hash on every use, so a test runs what the image was built from.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import REPO

# The build's CA bundle for TLS-intercepting proxies (the Makefile's CA_BUNDLE), when the host has one.
CA_BUNDLE = Path(os.environ.get("CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"))


def _package(name: str, lock: Path) -> dict[str, Any]:
    packages = [p for p in tomllib.loads(lock.read_text())["package"] if p["name"] == name]
    if len(packages) != 1:
        raise LookupError(f"uv.lock holds {len(packages)} versions of {name}")
    return packages[0]


def sdist(name: str, lock: Path = REPO / "uv.lock") -> dict[str, str]:
    """The locked sdist of name: {url, hash}."""
    return dict(_package(name, lock)["sdist"])


def pure_wheel(name: str, lock: Path = REPO / "uv.lock") -> dict[str, str]:
    """The locked py3-none-any wheel of name: {url, hash}."""
    wheels = [w for w in _package(name, lock).get("wheels", []) if w["url"].endswith("-none-any.whl")]
    if not wheels:
        raise LookupError(f"uv.lock has no pure-Python wheel of {name}")
    return dict(wheels[0])


def dependencies(name: str, lock: Path = REPO / "uv.lock") -> list[str]:
    return [d["name"] for d in _package(name, lock).get("dependencies", [])]


def fetch(entry: dict[str, str], cache: Path) -> Path:
    """The file at entry['url'] in cache, downloaded when missing; ValueError when its sha256 is
    not the lock's."""
    algo, _, digest = entry["hash"].partition(":")
    path = cache / entry["url"].rsplit("/", 1)[-1]
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        context = ssl.create_default_context(cafile=str(CA_BUNDLE) if CA_BUNDLE.is_file() else None)
        with urllib.request.urlopen(entry["url"], context=context, timeout=300) as response:
            data = response.read()
        tmp = path.with_suffix(path.suffix + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
    if hashlib.new(algo, path.read_bytes()).hexdigest() != digest:
        path.unlink()
        raise ValueError(f"{path.name}: its {algo} is not uv.lock's {digest}")
    return path
