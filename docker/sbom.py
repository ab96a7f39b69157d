"""The image's SBOM: cyclonedx-py's CycloneDX JSON of /opt/venv, with the runtime's Debian packages
and the image itself as the root component added, written to stdout.

Usage: sbom.py --stack STACK --debian-version 12.x PYTHON.cdx.json DEBIAN-PACKAGES.txt

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
from pathlib import Path
from typing import Any

from packageurl import PackageURL

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
    parser.add_argument("python_bom", type=Path)
    parser.add_argument("debian_packages", type=Path)
    args = parser.parse_args(argv)
    bom = json.loads(args.python_bom.read_text())
    debian = debian_components(args.debian_packages.read_text().splitlines(), args.debian_version.strip())
    json.dump(merge(bom, debian, args.stack, args.debian_version.strip()), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
