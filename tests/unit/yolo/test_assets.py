"""Weights and datasets fetched on request: URLs, the checks a download must pass, and the fetch
itself against a local HTTP server (host tests, loopback only)."""

from __future__ import annotations

import hashlib
import http.server
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rig.errors import RigError
from rig.yolo import assets

HEX = "ab" * 32


def torch_like(path: Path) -> bytes:
    """A zip laid out like torch.save's archive: what a .pt is checked against without torch."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/version", "3\n")
    return path.read_bytes()


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("yolo11n.pt", assets.Request("yolo11n.pt")),
        (f"yolo11n.pt@sha256:{HEX.upper()}", assets.Request("yolo11n.pt", HEX)),
        ("coco8.yaml", assets.Request("coco8.yaml")),
    ],
)
def test_parse_request(text: str, expect: assets.Request) -> None:
    assert assets.parse_request(text) == expect


@pytest.mark.parametrize(
    "text", ["../yolo11n.pt", "a/yolo11n.pt", "", "yolo11n.pt@md5:abc", "yolo11n.pt@sha256:abc"]
)
def test_parse_request_refuses(text: str) -> None:
    with pytest.raises(RigError):
        assets.parse_request(text)


def test_urls_default_and_mirror() -> None:
    assert assets.assets_base({}) is None
    assert assets.weights_url("yolo11n.pt", None) == (
        "https://github.com/ultralytics/assets/releases/download/v8.4.0/yolo11n.pt"
    )
    base = assets.assets_base({"RIG_ASSETS_URL": "https://mirror.example/yolo"})
    assert base == "https://mirror.example/yolo/"
    assert assets.weights_url("yolo11n.pt", base) == "https://mirror.example/yolo/yolo11n.pt"
    coco = "https://github.com/ultralytics/assets/releases/download/v0.0.0/coco8.zip"
    assert assets.dataset_url(coco, None) == coco
    assert assets.dataset_url(coco, base) == "https://mirror.example/yolo/coco8.zip"
    with pytest.raises(RigError, match="not an http"):
        assets.assets_base({"RIG_ASSETS_URL": "ftp://mirror"})


def test_checksum_files_and_expected_hash() -> None:
    assert assets.parse_checksum(f"{HEX}\n", "a.pt") == HEX
    assert assets.parse_checksum(f"{'cd' * 32}  b.pt\n{HEX} *a.pt\n", "a.pt") == HEX
    with pytest.raises(RigError, match="no SHA-256"):
        assets.parse_checksum("<html>not found</html>", "a.pt")
    assert assets.expected_sha256(None, None, "a.pt") is None
    assert assets.expected_sha256(HEX, None, "a.pt") == HEX
    assert assets.expected_sha256(None, HEX, "a.pt") == HEX
    with pytest.raises(RigError, match="differs"):
        assets.expected_sha256(HEX, "cd" * 32, "a.pt")


@pytest.mark.parametrize(
    ("size", "sha", "length", "expected", "problem"),
    [
        (10, HEX, 10, None, None),
        (10, HEX, None, HEX, None),
        (9, HEX, 10, None, "got 9 bytes, the server announced 10"),
        (0, HEX, None, None, "empty file"),
        (10, HEX, 10, "cd" * 32, "does not match"),
    ],
)
def test_verdict(size: int, sha: str, length: int | None, expected: str | None, problem: str | None) -> None:
    got = assets.verdict("a.pt", size=size, sha256=sha, content_length=length, expected=expected)
    assert got is None if problem is None else problem in (got or "")


def test_kind_problem(tmp_path: Path) -> None:
    pt = tmp_path / "ok.pt"
    torch_like(pt)
    assert assets.kind_problem(pt, "ok.pt") is None
    (tmp_path / "junk.pt").write_bytes(b"<html>rate limited</html>")
    assert "not a PyTorch archive" in (assets.kind_problem(tmp_path / "junk.pt", "junk.pt") or "")
    with zipfile.ZipFile(tmp_path / "plain.zip", "w") as z:
        z.writestr("coco8/a.txt", "x")
    assert assets.kind_problem(tmp_path / "plain.zip", "plain.zip") is None
    assert "no data.pkl" in (assets.kind_problem(tmp_path / "plain.zip", "plain.pt") or "")
    assert assets.kind_problem(tmp_path / "junk.pt", "model.onnx") is None  # nothing to check


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        # /short/: announces more than it sends, then hangs up.
        if self.path.startswith("/short/") and not self.path.endswith(".sha256"):
            body = torch_like(Path(self.directory) / "short.zip")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "srv"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Handler(*a, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", root
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetch_checks_and_keeps_only_what_passes(server: tuple[str, Path], tmp_path: Path) -> None:
    base, root = server
    body = torch_like(root / "yolo11n.pt")
    sha = hashlib.sha256(body).hexdigest()
    out = tmp_path / "weights"
    out.mkdir()

    assert assets.fetch(base + "yolo11n.pt", out / "yolo11n.pt", sha).read_bytes() == body
    with pytest.raises(RigError, match="does not match"):
        assets.fetch(base + "yolo11n.pt", out / "other.pt", "cd" * 32)
    (root / "yolo11n.pt.sha256").write_text(f"{'cd' * 32}  yolo11n.pt\n")  # published, and wrong
    with pytest.raises(RigError, match="does not match"):
        assets.fetch(base + "yolo11n.pt", out / "other.pt")
    (root / "junk.pt").write_bytes(b"<html>a login page</html>")
    with pytest.raises(RigError, match="not a PyTorch archive"):
        assets.fetch(base + "junk.pt", out / "junk.pt")
    with pytest.raises(RigError, match=r"broke off|announced"):
        assets.fetch(base + "short/x.pt", out / "x.pt")
    with pytest.raises(RigError, match="HTTP 404"):
        assets.fetch(base + "missing.pt", out / "missing.pt")
    assert sorted(p.name for p in out.iterdir()) == ["yolo11n.pt"]  # no partial file left


def test_fetch_offline_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(assets.Unreachable, match=r"cannot reach 127\.0\.0\.1:9"):
        assets.fetch("http://127.0.0.1:9/yolo11n.pt", tmp_path / "yolo11n.pt")
    assert list(tmp_path.iterdir()) == []
