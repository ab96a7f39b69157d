"""docker/sbom.py: cyclonedx-py's document of a Python environment with the Debian packages added,
valid against CycloneDX's schema. The build runs the same two steps on /opt/venv (Dockerfile: sbom);
tests/image/test_release.py checks the image's own SBOM."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.tags import parse_tag

from tests.helpers import REPO
from tests.helpers.sbom import components, schema_errors

DEBIAN = [
    "libc6=2.36-9+deb12u10 amd64",
    "openssh-server=1:9.2p1-2+deb12u7 amd64",
    "tini=0.19.0-1+b3 amd64",
]


def _sbom_module(name: str = "sbom") -> ModuleType:
    # By path: a folder named docker/ would shadow the Docker SDK as a package.
    spec = importlib.util.spec_from_file_location(f"rig_{name}", REPO / "docker" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def python_bom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the build's generator writes for an environment: here, the host tools' own venv."""
    generator = Path(sys.executable).with_name("cyclonedx-py")
    if not generator.exists() and shutil.which("cyclonedx-py") is None:
        pytest.skip("cyclonedx-py is not installed (make venv)")
    out = tmp_path_factory.mktemp("sbom") / "python.cdx.json"
    subprocess.run(
        [str(generator if generator.exists() else "cyclonedx-py"), "environment", "--no-validate",
         "--output-reproducible", "--pyproject", str(REPO / "pyproject.toml"), "--mc-type", "application",
         "-o", str(out), sys.executable],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return out


def merged_text(python_bom: Path, tmp_path: Path) -> str:
    """docker/sbom.py's output, as the build writes it to /opt/rig/sbom.cdx.json."""
    packages = tmp_path / "debian-packages.txt"
    packages.write_text("\n".join(DEBIAN) + "\n")
    module = _sbom_module()
    out = tmp_path / "sbom.cdx.json"
    with out.open("w") as f, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", f)
        rc = module.main(["--stack", "cu128", "--debian-version", "12.9", str(python_bom), str(packages)])
    assert rc == 0
    return out.read_text()


def merged(python_bom: Path, tmp_path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(merged_text(python_bom, tmp_path))
    return document


def test_the_merged_document_is_valid_cyclonedx(python_bom: Path, tmp_path: Path) -> None:
    document = merged(python_bom, tmp_path)
    assert schema_errors(document) == []
    assert components(document, "deb") == {
        "libc6": "2.36-9+deb12u10",
        "openssh-server": "1:9.2p1-2+deb12u7",
        "tini": "0.19.0-1+b3",
    }
    pypi = components(document, "pypi")
    assert pypi["pytest"] and pypi["cyclonedx-python-lib"]  # the host venv's, as installed


def test_the_root_is_the_image_and_depends_on_the_os(python_bom: Path, tmp_path: Path) -> None:
    document = merged(python_bom, tmp_path)
    root = document["metadata"]["component"]
    assert (root["type"], root["name"]) == ("container", "yolo-rig")
    assert root["version"].endswith("-cu128")
    assert root["licenses"] == [{"license": {"acknowledgement": "declared", "id": "AGPL-3.0-only"}}]
    edges = {d["ref"]: d.get("dependsOn", []) for d in document["dependencies"]}
    assert "os:debian@12.9" in edges[root["bom-ref"]]
    ssh = next(c for c in document["components"] if c["name"] == "openssh-server")
    # The epoch's colon and the '+' are percent-encoded in the package URL, as the purl spec says.
    assert ssh["purl"] == "pkg:deb/debian/openssh-server@1:9.2p1-2%2Bdeb12u7?arch=amd64&distro=debian-12.9"
    assert ssh["bom-ref"] in edges["os:debian@12.9"]


def test_the_schema_check_finds_errors(python_bom: Path, tmp_path: Path) -> None:
    """The check above can fail: a version of the wrong type, an unknown property, a URL with a space."""
    document = merged(python_bom, tmp_path)
    document["components"][0]["version"] = 3
    document["components"][1]["flavour"] = "vanilla"
    document["components"][2].setdefault("externalReferences", []).append(
        {"type": "website", "url": "https://example.org/a b"}
    )
    errors = schema_errors(document)
    assert len(errors) == 3, errors


def test_the_same_input_gives_the_same_bytes(python_bom: Path, tmp_path: Path) -> None:
    """Reproducible: no clock, no random serial number (the image's SBOM is compared across builds)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = merged_text(python_bom, tmp_path / "a")
    assert first == merged_text(python_bom, tmp_path / "b")
    document = json.loads(first)
    assert "serialNumber" not in document and "timestamp" not in document["metadata"]


def test_each_python_package_carries_the_locks_hash_of_the_wheel_installed(python_bom: Path) -> None:
    """The host tools' venv is installed from this uv.lock: every package in it has its wheel's hash."""
    module = _sbom_module()
    document = json.loads(python_bom.read_text())
    site_packages = Path(sysconfig.get_paths()["purelib"])
    lock = (REPO / "uv.lock").read_text()
    wheels, sdists = module.lock_artifacts(lock)
    assert module.with_hashes(document, wheels, sdists, module.installed_tags(site_packages)) == []
    pypi = [c for c in document["components"] if c.get("purl", "").startswith("pkg:pypi/")]
    assert len(pypi) > 30 and all(len(c["hashes"]) == 1 for c in pypi)
    pytest_component = next(c for c in pypi if c["name"] == "pytest")
    digest = pytest_component["hashes"][0]["content"]
    assert pytest_component["hashes"][0]["alg"] == "SHA-256" and f"sha256:{digest}" in lock
    wheel = next(p for p in site_packages.glob("pytest-*.dist-info")) / "WHEEL"
    assert "py3-none-any" in wheel.read_text()
    # Another installed wheel than the lock's (the tags differ): named, not hashed.
    installed = module.installed_tags(site_packages)
    key = next(k for k in installed if k[0] == "pytest")
    other = dict(installed, **{})
    other[key] = frozenset()
    fresh = json.loads(python_bom.read_text())
    assert module.with_hashes(fresh, wheels, sdists, other) == [f"pytest=={key[1]}"]
    assert "hashes" not in next(c for c in fresh["components"] if c["name"] == "pytest")
    # A WHEEL file that names another tag than the wheel's file name (torch's say linux_x86_64, their
    # files manylinux1): the wheel an installer prefers for this interpreter is the one.
    torch_like = {(frozenset(parse_tag("cp311-cp311-manylinux1_x86_64")), "a" * 64),
                  (frozenset(parse_tag("cp311-cp311-win_amd64")), "b" * 64)}  # fmt: skip
    bom = {"components": [{"name": "torch", "version": "2.3.1", "purl": "pkg:pypi/torch@2.3.1"}]}
    linux = [*parse_tag("cp311-cp311-manylinux_2_17_x86_64"), *parse_tag("cp311-cp311-manylinux1_x86_64")]
    installed_torch = {("torch", "2.3.1"): frozenset(parse_tag("cp311-cp311-linux_x86_64"))}
    assert module.with_hashes(bom, {("torch", "2.3.1"): sorted(torch_like)}, {}, installed_torch, linux) == []
    assert bom["components"][0]["hashes"] == [{"alg": "SHA-256", "content": "a" * 64}]
    assert module.with_hashes(bom, {("torch", "2.3.1"): sorted(torch_like)}, {}, installed_torch, []) == [
        "torch==2.3.1"
    ]


def _fake_image(root: Path) -> Path:
    """A tree as the image has it: a Debian package (listed, its MD5s, a conffile), a distribution
    (its RECORD, bytecode compiled at install), and what no package installed."""
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    for path, text in {
        "usr/bin/tool": "tool\n",
        "etc/tool.conf": "conf\n",
        "usr/share/doc/tool/README": "readme\n",
        "usr/include/python3.11/Python.h": "/* headers */\n",
        "usr/local/bin/pip": "#!/bin/sh\n",
        "proc/1/status": "skipped\n",
        "tmp/scratch": "skipped\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (info / "tool.list").write_text(
        "/.\n/usr\n/usr/bin\n/usr/bin/tool\n/etc/tool.conf\n/usr/share/doc/tool/README\n"
    )
    md5 = {
        p: hashlib.md5((root / p).read_bytes()).hexdigest()
        for p in ("usr/bin/tool", "usr/share/doc/tool/README")
    }
    (info / "tool.md5sums").write_text("".join(f"{d}  {p}\n" for p, d in md5.items()))
    (root / "var/lib/dpkg/status").write_text(
        "Package: tool\nStatus: install ok installed\nConffiles:\n"
        f" /etc/tool.conf {hashlib.md5(b'conf' + bytes([10])).hexdigest()}\n\n"
    )
    site = root / "opt/venv/lib/python3.11/site-packages"
    (site / "pkg/__pycache__").mkdir(parents=True)
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg/__init__.py").write_text("x = 1\n")
    (site / "pkg/default.yaml").write_text("epochs: 100\n")
    (site / "pkg/__pycache__/__init__.cpython-311.pyc").write_bytes(b"bytecode")
    (site / "pkg/__pycache__/planted.cpython-311.pyc").write_bytes(b"no source")
    record_lines = []
    for name in ("pkg/__init__.py", "pkg/default.yaml"):
        data = (site / name).read_bytes()
        encoded = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{name},sha256={encoded},{len(data)}")
    (site / "pkg-1.0.dist-info/RECORD").write_text(
        "\n".join([*record_lines, "pkg-1.0.dist-info/RECORD,,"]) + "\n"
    )
    (root / "usr/local/bin/pip3").symlink_to("pip")
    # A merged /usr: dpkg lists /lib/libz.so.1, which the tree holds at /usr/lib/libz.so.1.
    (root / "usr/lib").mkdir()
    elf = b"\x7fELF"
    (root / "usr/lib/libz.so.1").write_bytes(elf)
    (root / "lib").symlink_to("usr/lib")
    (info / "zlib1g.list").write_text("/lib\n/lib/libz.so.1\n")
    (info / "zlib1g.md5sums").write_text(f"{hashlib.md5(elf).hexdigest()}  lib/libz.so.1\n")
    return site


def test_the_files_no_package_installed_are_listed_with_their_hash(tmp_path: Path) -> None:
    module = _sbom_module("sbom_files")
    site = _fake_image(tmp_path)
    # What the build does after installing: replace a package's config and a distribution's file.
    (tmp_path / "etc/tool.conf").write_text("ours\n")
    (site / "pkg/default.yaml").write_text("epochs: 300\n")
    (tmp_path / "usr/bin/tool").write_text("tool\n")  # written again, the same bytes: still the package's
    owned = module.dpkg_owned(tmp_path) | module.record_owned(site, tmp_path)
    found = {c["name"]: c for c in module.census(tmp_path, module.walk(tmp_path), owned)}
    origin = {name: c["properties"][0]["value"] for name, c in found.items()}
    assert origin == {
        "/etc/tool.conf": "changed (deb tool)",
        "/opt/venv/lib/python3.11/site-packages/pkg/__pycache__/planted.cpython-311.pyc": "unpackaged",
        "/opt/venv/lib/python3.11/site-packages/pkg/default.yaml": "changed (pypi pkg)",
        "/usr/include/python3.11/Python.h": "unpackaged",
        "/usr/local/bin/pip": "unpackaged",
    }
    pip = found["/usr/local/bin/pip"]
    assert pip["type"] == "file" and pip["hashes"] == [
        {"alg": "SHA-256", "content": hashlib.sha256(b"#!/bin/sh\n").hexdigest()}
    ]


def test_the_document_with_files_is_valid_cyclonedx(python_bom: Path, tmp_path: Path) -> None:
    module = _sbom_module("sbom_files")
    root = tmp_path / "image"
    site = _fake_image(root)
    packages = tmp_path / "packages.cdx.json"
    packages.write_text(merged_text(python_bom, tmp_path))
    out = tmp_path / "sbom.cdx.json"
    with out.open("w") as f, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", f)
        assert module.main(["--root", str(root), "--site-packages", str(site), str(packages)]) == 0
    document = json.loads(out.read_text())
    assert schema_errors(document) == []
    assert "/usr/local/bin/pip" in {c["name"] for c in document["components"] if c["type"] == "file"}
