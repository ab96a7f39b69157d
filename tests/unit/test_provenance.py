"""tools/provenance.py: the build's provenance predicate, and no secret in it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

TOOL = REPO / "tools" / "provenance.py"


def run(*args: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60, check=True
    )
    document: dict = json.loads(out.stdout)  # type: ignore[type-arg]
    return document


def test_the_predicate_names_the_revision_the_files_the_base_and_the_arguments() -> None:
    doc = run(
        "--image-id", "sha256:aa", "--revision", "0123abcd", "--source", "https://forge.example/ml/yolo-rig.git",
        "--dependency", "Dockerfile=sha256:11", "--dependency", "uv.lock=sha256:22",
        "--base-image", "debian:bookworm-slim", "--base-digest", "sha256:33",
        "--build-arg", "STACK=cu121", "--build-arg", "RIG_WEIGHTS=",
    )  # fmt: skip
    build = doc["buildDefinition"]
    assert build["externalParameters"] == {
        "source": {"uri": "https://forge.example/ml/yolo-rig.git", "revision": "0123abcd"},
        "buildArgs": {"STACK": "cu121", "RIG_WEIGHTS": ""},
    }
    assert build["internalParameters"] == {"imageId": "sha256:aa"}
    assert build["resolvedDependencies"] == [
        {"uri": "git+https://forge.example/ml/yolo-rig.git@0123abcd", "digest": {"gitCommit": "0123abcd"}},
        {"name": "Dockerfile", "digest": {"sha256": "11"}},
        {"name": "uv.lock", "digest": {"sha256": "22"}},
        {"uri": "docker-image://debian:bookworm-slim", "digest": {"sha256": "33"}},
    ]
    assert doc["runDetails"] == {"builder": {"id": "make build"}}


def test_a_user_or_token_in_a_url_never_reaches_it() -> None:
    doc = json.dumps(
        run(
            "--image-id", "sha256:aa", "--source", "https://x-access-token:ghs_SECRET@github.com/o/r.git",
            "--base-image", "debian:bookworm-slim", "--base-digest", "sha256:33",
            "--build-arg", "PIP_INDEX_URL=https://deploy:SECRET@pypi.corp/simple",
            "--build-arg", "APT_MIRROR=http://user:SECRET@mirror.corp/debian",
            "--builder", "https://bot:SECRET@ci.corp/run/1",
        )
    )  # fmt: skip
    assert "SECRET" not in doc
    assert "https://pypi.corp/simple" in doc and "http://mirror.corp/debian" in doc
    assert "https://github.com/o/r.git" in doc and "https://ci.corp/run/1" in doc
