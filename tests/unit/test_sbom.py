"""docker/sbom.py: cyclonedx-py's document of a Python environment with the Debian packages added,
valid against CycloneDX's schema. The build runs the same two steps on /opt/venv (Dockerfile: sbom);
tests/image/test_release.py checks the image's own SBOM."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import REPO
from tests.helpers.sbom import components, schema_errors

DEBIAN = [
    "libc6=2.36-9+deb12u10 amd64",
    "openssh-server=1:9.2p1-2+deb12u7 amd64",
    "tini=0.19.0-1+b3 amd64",
]


def _sbom_module() -> ModuleType:
    # By path: a folder named docker/ would shadow the Docker SDK as a package.
    spec = importlib.util.spec_from_file_location("rig_sbom", REPO / "docker" / "sbom.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
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
