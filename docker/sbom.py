"""The image's SBOM: cyclonedx-py's CycloneDX JSON of /opt/venv, with the runtime's Debian packages
and the image itself as the root component added, and each Python package's SHA-256 from uv.lock
(the hash of the very wheel installed), written to stdout.

Usage: sbom.py --stack STACK --debian-version 12.x [--lock uv.lock --site-packages DIR]
               PYTHON.cdx.json DEBIAN-PACKAGES.txt

The wheel installed is the lock's wheel of that name and version whose tags include one of the
installed distribution's (its .dist-info/WHEEL `Tag:` lines); a package the lock holds only a source
archive of gets that archive's hash (it was built from it), the project itself none.
docker/sbom_files.py then adds the files no package installed.

DEBIAN-PACKAGES.txt is the Dockerfile's dpkg-query list, one `name=version arch` a line. Each
package becomes a component with its package URL (pkg:deb/debian/NAME@VERSION?arch=...&distro=...),
made by packageurl-python (cyclonedx-bom's own dependency), under an operating-system component
the image depends on. No clock and no random serial number: the same inputs give the same bytes.
Runs once, at build time, in the SBOM stage's venv.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packageurl import PackageURL
from packaging.tags import Tag, parse_tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT_REF = "root-component"  # cyclonedx-py's bom-ref for the --pyproject component


def debian_components(lines: list[str], debian_version: str) -> list[dict[str, Any]]:
    """One CycloneDX component per `name=version arch` line."""
    distro = f"debian-{debian_version}"
    components = []
    for line in lines:
        if not line.strip():
            continue
        name_version, arch = line.split()
        name, version = name_version.split("=", 1)
        purl = PackageURL(
            type="deb",
            namespace="debian",
            name=name,
            version=version,
            qualifiers={"arch": arch, "distro": distro},
        ).to_string()
        components.append(
            {"bom-ref": purl, "name": name, "purl": purl, "type": "library", "version": version}
        )
    return components


Wheels = dict[tuple[str, str], list[tuple[frozenset[Tag], str]]]


def lock_artifacts(lock_text: str) -> tuple[Wheels, dict[tuple[str, str], str]]:
    """uv.lock's wheels, (name, version) -> [(the wheel's tags, its sha256 hex)], and its source
    archives, (name, version) -> sha256 hex: the hash of what a package without a wheel was built from."""
    wheels: Wheels = {}
    sdists: dict[tuple[str, str], str] = {}
    for package in tomllib.loads(lock_text).get("package", []):
        key = (canonicalize_name(package["name"]), str(package.get("version", "")))
        algorithm, _, digest = package.get("sdist", {}).get("hash", "").partition(":")
        if algorithm == "sha256":
            sdists[key] = digest
        for wheel in package.get("wheels", []):
            filename = wheel["url"].rsplit("/", 1)[-1] if "url" in wheel else wheel.get("filename", "")
            algorithm, _, digest = wheel.get("hash", "").partition(":")
            if not filename.endswith(".whl") or algorithm != "sha256":
                continue
            name, version, _build, tags = parse_wheel_filename(filename)
            wheels.setdefault((name, str(version)), []).append((frozenset(tags), digest))
    return wheels, sdists


def installed_tags(site_packages: Path) -> dict[tuple[str, str], frozenset[Tag]]:
    """Each installed distribution's (name, version) -> the tags its WHEEL file names."""
    installed = {}
    for wheel_file in site_packages.glob("*.dist-info/WHEEL"):
        metadata = (wheel_file.parent / "METADATA").read_text(errors="replace")
        fields = dict(line.split(": ", 1) for line in metadata.splitlines()[:20] if ": " in line)
        tags = frozenset(
            tag
            for line in wheel_file.read_text(errors="replace").splitlines()
            if line.startswith("Tag: ")
            for tag in parse_tag(line[5:].strip())
        )
        installed[(canonicalize_name(fields.get("Name", "")), fields.get("Version", ""))] = tags
    return installed


def best_supported(candidates: Sequence[tuple[frozenset[Tag], str]], supported: Sequence[Tag]) -> list[str]:
    """The digest of the candidate an installer prefers: the one with the earliest supported tag."""
    rank = {tag: i for i, tag in enumerate(supported)}
    scored = [
        (min((rank[t] for t in tags if t in rank), default=len(rank)), digest) for tags, digest in candidates
    ]
    best = min((score for score, _ in scored), default=len(rank))
    return sorted({digest for score, digest in scored if score == best < len(rank)})


def with_hashes(
    bom: dict[str, Any],
    wheels: Wheels,
    sdists: Mapping[tuple[str, str], str],
    installed: Mapping[tuple[str, str], frozenset[Tag]],
    supported: Sequence[Tag] = (),
) -> list[str]:
    """Each pypi component gets the SHA-256 of the lock's wheel it was installed from (of its source
    archive where the lock holds no wheel: the package was built here); returns the components the lock
    has wheels of but none matching what is installed (a stale SBOM stage). Where the installed
    WHEEL file names no tag of the lock's wheels, the wheel an installer picks for this interpreter
    (`supported`: its tags, most preferred first) is the one."""
    unmatched = []
    for component in bom.get("components", []):
        if not component.get("purl", "").startswith("pkg:pypi/"):
            continue
        key = (canonicalize_name(component["name"]), component["version"])
        candidates = wheels.get(key, [])
        tags = installed.get(key, frozenset())
        digests = sorted({digest for wheel_tags, digest in candidates if wheel_tags & tags})
        if not digests and candidates:  # a WHEEL that names another tag than its file (torch's)
            digests = best_supported(candidates, supported)
        if len(digests) == 1:
            component["hashes"] = [{"alg": "SHA-256", "content": digests[0]}]
        elif candidates:
            unmatched.append(f"{key[0]}=={key[1]}")
        elif key in sdists:
            component["hashes"] = [{"alg": "SHA-256", "content": sdists[key]}]
    return unmatched


def merge(
    bom: dict[str, Any], debian: list[dict[str, Any]], stack: str, debian_version: str
) -> dict[str, Any]:
    """`bom` with the image as its root component, the Debian packages under an OS component."""
    root = bom["metadata"]["component"]
    # The image (a container) is what this SBOM describes: versioned as its tag, VERSION-STACK.
    root.update(type="container", version=f"{root['version']}-{stack}")
    os_ref = f"os:debian@{debian_version}"
    bom["components"].append(
        {"bom-ref": os_ref, "name": "debian", "type": "operating-system", "version": debian_version}
    )
    bom["components"].extend(debian)
    dependencies = bom.setdefault("dependencies", [])
    for entry in dependencies:
        if entry["ref"] == ROOT_REF:
            entry["dependsOn"] = sorted({*entry.get("dependsOn", []), os_ref})
            break
    else:
        dependencies.append({"ref": ROOT_REF, "dependsOn": [os_ref]})
    dependencies.append({"ref": os_ref, "dependsOn": [c["bom-ref"] for c in debian]})
    return bom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--debian-version", required=True)
    parser.add_argument("--lock", type=Path, help="uv.lock: each Python package's wheel hash")
    parser.add_argument("--site-packages", type=Path, help="the venv's site-packages, with --lock")
    parser.add_argument("python_bom", type=Path)
    parser.add_argument("debian_packages", type=Path)
    args = parser.parse_args(argv)
    bom = json.loads(args.python_bom.read_text())
    if args.lock:
        if args.site_packages is None:
            parser.error("--lock needs --site-packages")
        wheels, sdists = lock_artifacts(args.lock.read_text())
        unmatched = with_hashes(bom, wheels, sdists, installed_tags(args.site_packages), list(sys_tags()))
        if unmatched:
            print(
                f"ERROR sbom: no wheel in {args.lock} matches the installed {', '.join(unmatched)}",
                file=sys.stderr,
            )
            return 1
    debian = debian_components(args.debian_packages.read_text().splitlines(), args.debian_version.strip())
    json.dump(merge(bom, debian, args.stack, args.debian_version.strip()), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
