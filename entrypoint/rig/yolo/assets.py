"""Pretrained weights and Ultralytics' named datasets, fetched only when asked (`rig weights get`,
`rig datasets get`): training itself stays offline (YOLO_OFFLINE), so a run never downloads.

Where from: RIG_ASSETS_URL, a folder of files over HTTP(S) (a company mirror), else Ultralytics'
own GitHub release, the one the pinned Ultralytics' attempt_download_asset() uses. What a download
must match before it is kept: the server's Content-Length; a SHA-256, when one is given
(`yolo11n.pt@sha256:HEX`) or published beside the file (`yolo11n.pt.sha256`, sha256sum's format);
and what its kind allows: a .pt is a PyTorch zip archive, a .zip is an intact zip. It is written
under a temporary name beside its target and renamed only when all of that holds.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import requests

from rig import log
from rig.errors import RigError

_logger = log.get("assets")

# Ultralytics 8.4.190: attempt_download_asset(release="v8.4.0") from GITHUB_ASSETS_REPO.
DEFAULT_ASSETS_URL = "https://github.com/ultralytics/assets/releases/download/v8.4.0/"
ASSETS_URL_VAR = "RIG_ASSETS_URL"
CHECKSUM_SUFFIX = ".sha256"
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_CHUNK = 1 << 20


class Unreachable(RigError):
    """The server could not be reached at all: offline, or a wrong RIG_ASSETS_URL."""


# ---------------------------------------------------------------------------------------------
# Decide: pure functions.


@dataclass(frozen=True)
class Request:
    """One asset asked for: a file name, and the SHA-256 it must have, when given."""

    name: str
    sha256: str | None = None


def parse_request(text: str) -> Request:
    """'yolo11n.pt' or 'yolo11n.pt@sha256:HEX' -> Request; a path or a bad digest is one line."""
    name, sep, digest = text.strip().partition("@")
    if not name or name in {".", ".."} or "/" in name or "\\" in name:
        raise RigError(f"{text!r}: give a file name such as yolo11n.pt (optionally @sha256:HEX), not a path")
    if not sep:
        return Request(name)
    algo, _, hexdigest = digest.partition(":")
    if algo.lower() != "sha256" or not _SHA256.fullmatch(hexdigest):
        raise RigError(f"{text!r}: the digest must be @sha256: followed by 64 hex digits")
    return Request(name, hexdigest.lower())


def assets_base(environ: Mapping[str, str] = os.environ) -> str | None:
    """The mirror's base URL (ending in /) from RIG_ASSETS_URL, or None for Ultralytics' own."""
    base = environ.get(ASSETS_URL_VAR, "").strip()
    if not base:
        return None
    if urlsplit(base).scheme not in {"http", "https"}:
        raise RigError(f"{ASSETS_URL_VAR}={base} is not an http(s):// URL")
    return base if base.endswith("/") else base + "/"


def weights_url(name: str, base: str | None) -> str:
    return (base or DEFAULT_ASSETS_URL) + quote(name)


def dataset_url(download: str, base: str | None) -> str:
    """A dataset zip's URL: its yaml's `download:` URL, or the same file name on the mirror."""
    return base + quote(PurePosixPath(urlsplit(download).path).name) if base else download


def parse_checksum(text: str, name: str) -> str:
    """The SHA-256 from a checksum file: a bare digest, or sha256sum's 'HEX  name' lines."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    for words in lines:
        listed = words[1].lstrip("*") if len(words) > 1 else None
        if _SHA256.fullmatch(words[0]) and listed in {None, name}:
            return words[0].lower()
    raise RigError(f"{name}{CHECKSUM_SUFFIX} on the server holds no SHA-256 for {name}")


def expected_sha256(asked: str | None, published: str | None, name: str) -> str | None:
    if asked and published and asked != published:
        raise RigError(
            f"{name}: the SHA-256 given ({asked[:12]}...) differs from the server's ({published[:12]}...)"
        )
    return asked or published


def verdict(
    name: str, *, size: int, sha256: str, content_length: int | None, expected: str | None
) -> str | None:
    """Why a finished download must not be kept, or None when it may."""
    if content_length is not None and size != content_length:
        return f"{name}: got {size} bytes, the server announced {content_length}"
    if size == 0:
        return f"{name}: the server sent an empty file"
    if expected and sha256 != expected:
        return f"{name}: SHA-256 {sha256} does not match the expected {expected}"
    return None


def kind_problem(path: Path, name: str) -> str | None:
    """What the file's kind allows checking without a published hash: .pt/.pth are PyTorch's zip
    archives (a data.pkl inside), a .zip reads back intact."""
    suffix = Path(name).suffix.lower()
    if suffix not in {".pt", ".pth", ".zip"}:
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        return f"{name} is not a {'zip' if suffix == '.zip' else 'PyTorch'} archive ({e})"
    if broken is not None:
        return f"{name}: {broken} inside it is corrupt"
    if suffix != ".zip" and not any(n.endswith("/data.pkl") for n in names):
        return f"{name} is a zip but not a PyTorch checkpoint (no data.pkl)"
    return None


# ---------------------------------------------------------------------------------------------
# Execute: fetch, check, rename.


def _get(session: requests.Session, url: str, stream: bool) -> requests.Response:
    try:
        return session.get(url, stream=stream, timeout=(10, 60))
    except (requests.ConnectionError, requests.Timeout) as e:
        host = urlsplit(url).netloc
        raise Unreachable(f"cannot reach {host} ({type(e).__name__})") from None


def _published_sha256(session: requests.Session, url: str, name: str) -> str | None:
    response = _get(session, url + CHECKSUM_SUFFIX, stream=False)
    if response.status_code != 200:
        return None
    try:
        text = response.text
    except requests.RequestException as e:
        raise RigError(f"{name}{CHECKSUM_SUFFIX}: the server broke off ({type(e).__name__})") from None
    return parse_checksum(text, name)


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def update(self, n: int) -> None:
        pass


def _progress(total: int | None, name: str) -> Any:
    """tqdm's bar (the image has it, with Ultralytics); none where it is missing (the host's tests)."""
    try:
        tqdm: Any = importlib.import_module("tqdm").tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name, mininterval=1)


def fetch(url: str, dest: Path, sha256: str | None = None, session: requests.Session | None = None) -> Path:
    """Download url to dest through a temporary file beside it; raise RigError unless it checks out."""
    session = session or requests.Session()
    name = unquote(PurePosixPath(urlsplit(url).path).name)  # the server's name, not dest's
    expected = expected_sha256(sha256, _published_sha256(session, url, name), name)
    response = _get(session, url, stream=True)
    with response:
        if response.status_code != 200:
            raise RigError(f"{url}: HTTP {response.status_code} {response.reason}")
        length = response.headers.get("Content-Length")
        content_length = int(length) if length and length.isdigit() else None
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        tmp = Path(tmp_name)
        try:
            digest, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out, _progress(content_length, name) as bar:
                try:
                    for chunk in response.iter_content(_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                        bar.update(len(chunk))
                except requests.RequestException as e:
                    broke = f"{name}: the download broke off after {size} bytes ({type(e).__name__})"
                    raise RigError(broke) from None
            problem = verdict(
                name, size=size, sha256=digest.hexdigest(), content_length=content_length, expected=expected
            ) or kind_problem(tmp, name)
            if problem:
                raise RigError(f"{problem}; nothing was kept")
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
    how = "SHA-256 matches" if expected else "no published SHA-256; size and format checked"
    _logger.info("%s: %d bytes from %s (%s)", dest, size, urlsplit(url).netloc, how)
    return dest
