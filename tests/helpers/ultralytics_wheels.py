"""Released Ultralytics wheels, other than the image's, for tests that install one as a user would.

Each is fetched from the package index once (`pip download --require-hashes`, through the build's
CA bundle), into build/ultralytics-wheels, and checked against the sha256 below on every use.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import REPO
from tests.helpers.locked_files import CA_BUNDLE

CACHE = REPO / "build" / "ultralytics-wheels"
# (distribution, version) -> the wheel's sha256, as PyPI lists it.
SHA256 = {
    ("ultralytics", "8.4.100"): "ee9d98cc570d673f02eca7485d0753c9cc9c67e277c2ff77a404a96f086e6528",
    ("ultralytics-opencv-headless", "8.4.100"): (
        "590f7ad115f31b95ba6c3538dc37eae32a8fee9ef5f840cd0c988ea62652e672"
    ),
}


def wheel(dist: str, version: str, cache: Path = CACHE) -> Path:
    """The pure-Python wheel of dist==version in cache, downloaded when missing; ValueError when its
    sha256 is not the one above."""
    digest = SHA256[(dist, version)]
    path = cache / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            requirements = Path(tmp) / "requirements.txt"
            requirements.write_text(f"{dist}=={version} --hash=sha256:{digest}\n")
            env = {**os.environ, **({"PIP_CERT": str(CA_BUNDLE)} if CA_BUNDLE.is_file() else {})}
            python = sys.executable if _has_pip() else "python3"
            options = ["-q", "--no-deps", "--only-binary=:all:", "--require-hashes", "-r", str(requirements)]
            subprocess.run(
                [python, "-m", "pip", "download", *options, "-d", tmp],
                env=env,
                check=True,
                timeout=300,
            )
            (Path(tmp) / path.name).replace(path)
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        path.unlink()
        raise ValueError(f"{path.name}: its sha256 is not {digest}")
    return path


def _has_pip() -> bool:
    import importlib.util

    return importlib.util.find_spec("pip") is not None
