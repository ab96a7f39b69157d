"""The build's provenance: an in-toto SLSA v1 predicate (https://slsa.dev/provenance/v1) for the image
`make build` just made, which `make push` attaches to the pushed digest with cosign.

It records what a build of yolo-rig depends on: the source and its revision, the Dockerfile's and
uv.lock's SHA-256 as the build read them, the base image's digest, and the build arguments (never a
secret: the CA bundle is a BuildKit secret and is not among them, and a user name or token in a URL,
`https://user:token@mirror/simple`, is removed). It runs with the built image's own Python
(tools/provenance.sh), so the host needs none; stdlib only, Python 3.10 and newer.

Usage: provenance.py --image-id ID --revision SHA --source URL --dependency NAME=DIGEST...
                     --base-image REF --base-digest DIGEST [--build-arg NAME=VALUE...] [--builder ID]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:yolo-rig:make-build:v1"  # `make build` (Makefile, Dockerfile): what buildArgs mean
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def redact(value: str) -> str:
    """A URL without its user information (a token in a mirror's or a forge's URL)."""
    return _USERINFO.sub(r"\1", value)


def _digest(text: str) -> dict[str, str]:
    algorithm, _, hexdigest = text.partition(":")
    if not hexdigest:
        algorithm, hexdigest = "sha256", text
    return {algorithm: hexdigest}


def predicate(
    *,
    image_id: str,
    revision: str,
    source: str,
    dependencies: Mapping[str, str],
    base_image: str,
    base_digest: str,
    build_args: Mapping[str, str],
    builder: str,
) -> dict[str, Any]:
    """The SLSA v1 predicate (pure)."""
    source = redact(source)
    resolved: list[dict[str, Any]] = []
    if revision:
        where = {"uri": f"git+{source}@{revision}"} if source else {"name": "source"}
        resolved.append({**where, "digest": {"gitCommit": revision}})
    resolved += [{"name": name, "digest": _digest(digest)} for name, digest in dependencies.items()]
    resolved.append({"uri": f"docker-image://{redact(base_image)}", "digest": _digest(base_digest)})
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "source": {"uri": source, "revision": revision},
                "buildArgs": {k: redact(v) for k, v in sorted(build_args.items())},
            },
            "internalParameters": {"imageId": image_id},
            "resolvedDependencies": resolved,
        },
        "runDetails": {"builder": {"id": builder}},
    }


def _pairs(items: Sequence[str], option: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"ERROR provenance: {option} {item!r} is not NAME=VALUE")
        pairs[name] = value
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-id", required=True)
    p.add_argument("--revision", default="")
    p.add_argument("--source", default="")
    p.add_argument("--dependency", action="append", default=[], metavar="NAME=DIGEST")
    p.add_argument("--base-image", required=True)
    p.add_argument("--base-digest", required=True)
    p.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--builder", default="make build")
    a = p.parse_args(argv)
    document = predicate(
        image_id=a.image_id,
        revision=a.revision,
        source=a.source,
        dependencies=_pairs(a.dependency, "--dependency"),
        base_image=a.base_image,
        base_digest=a.base_digest,
        build_args=_pairs(a.build_arg, "--build-arg"),
        builder=redact(a.builder),
    )
    json.dump(document, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
