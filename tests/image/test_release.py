"""The image as a product people install: its release labels and tags, its SBOM (in the image and as
the build's output), and a published image used on a host where no Python runs: pushed with
`make push` to a real registry on loopback and signed there with cosign (its SBOM and provenance
attached), its local tags removed, verified and started by `make up` from the pull (no `docker
build`), and reached over SSH; an altered image under the same tag is refused in one line. One push
serves all of it: the image is 6 GB."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, SCRIPTS, needs_ssh_keygen
from tests.helpers.compose import take_down
from tests.helpers.containers import Containers, free_port
from tests.helpers.lock import locked_runtime, locked_versions, normalize
from tests.helpers.names import unique
from tests.helpers.sbom import components, schema_errors
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.image

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SBOM = "/opt/rig/sbom.cdx.json"


@pytest.fixture(scope="module")
def labels(docker_client: Any, image: str) -> dict[str, str]:
    return dict(docker_client.images.get(image).labels)


@pytest.fixture(scope="module")
def stack(labels: dict[str, str]) -> str:
    return labels["io.yolo-rig.stack"]


@pytest.mark.stack
def test_the_release_labels_and_tags(
    docker_client: Any, image: str, labels: dict[str, str], stack: str
) -> None:
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == "AGPL-3.0-only"
    assert "org.opencontainers.image.source" in labels
    revision = labels["org.opencontainers.image.revision"]
    assert re.fullmatch(r"[0-9a-f]{12}", revision), revision
    # created: the commit's time (SOURCE_DATE_EPOCH), so two builds of a commit carry the same label.
    commit_time = subprocess.run(
        ["git", "show", "-s", "--format=%ct", revision], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    if commit_time.returncode != 0:
        pytest.skip(f"revision {revision} is not in this checkout")
    created = subprocess.run(
        ["date", "-u", "-d", f"@{commit_time.stdout.strip()}", "+%Y-%m-%dT%H:%M:%SZ"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()  # fmt: skip
    assert labels["org.opencontainers.image.created"] == created
    # What NGC's PyTorch images set, for enroot's PyTorch hook: the locked torch.
    env = dict(e.split("=", 1) for e in docker_client.images.get(image).attrs["Config"]["Env"])
    assert env["PYTORCH_VERSION"] == locked_versions(stack)["TORCH_VERSION"]
    # `make build` tags the image VERSION-STACK too.
    name = image.rsplit(":", 1)[0]
    assert docker_client.images.get(f"{name}:{VERSION}-{stack}").id == docker_client.images.get(image).id


@pytest.fixture(scope="module")
def sbom(image: str) -> dict[str, Any]:
    """The image's SBOM, read from the container's stdout as `make build` reads it (not through the
    engine's log, which splits and may drop the long lines of a file of about a megabyte)."""
    argv = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", image, SBOM]
    text = subprocess.run(argv, capture_output=True, timeout=120, check=True).stdout
    document: dict[str, Any] = json.loads(text)
    return document


@pytest.mark.stack
def test_the_sbom_is_valid_cyclonedx_and_the_builds_output(sbom: dict[str, Any], stack: str) -> None:
    assert schema_errors(sbom) == []
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == ("yolo-rig", f"{VERSION}-{stack}", "container")
    output = REPO / "build" / f"yolo-rig-{VERSION}-{stack}.cdx.json"
    assert output.exists(), f"make build did not write {output.relative_to(REPO)}"
    assert json.loads(output.read_text()) == sbom


@pytest.mark.stack
def test_the_sbom_holds_the_locked_versions_and_the_debian_packages(
    containers: Containers, sbom: dict[str, Any], stack: str
) -> None:
    scripts = {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}
    rc, out = containers.oneshot(
        ["bash", "-c", "python /tests/installed.py && cat /opt/rig/debian-packages.txt"], volumes=scripts
    )
    assert rc == 0, out
    first, *debian_lines = out.strip().splitlines()
    environment = json.loads(first)["environment"]
    locked = {normalize(k): v for k, v in locked_runtime(environment, stack).items()}
    python = {normalize(k): v for k, v in components(sbom, "pypi").items()}
    assert python == locked
    debian = dict(line.split()[0].split("=", 1) for line in debian_lines)
    assert components(sbom, "deb") == debian
    headline = locked_versions(stack)
    assert python["torch"] == headline["TORCH_VERSION"]
    assert python["ultralytics-opencv-headless"] == headline["ULTRALYTICS_VERSION"]
    assert debian["openssh-server"].startswith("1:9.")
    # The generator and what it alone needs stay in the build's SBOM stage, out of the runtime.
    assert (
        not {"cyclonedx-bom", "cyclonedx-python-lib", "packageurl-python", "py-serializable"} & python.keys()
    )
    rc, out = containers.oneshot(["bash", "-c", "ls -d /opt/sbom 2>&1; command -v cyclonedx-py; true"])
    assert "No such file" in out and "cyclonedx-py" not in out.replace("/opt/sbom", ""), out


@pytest.mark.stack
def test_the_sbom_carries_the_locks_hashes_and_the_files_no_package_installed(
    containers: Containers, sbom: dict[str, Any]
) -> None:
    lock = (REPO / "uv.lock").read_text()
    pypi = [c for c in sbom["components"] if c.get("purl", "").startswith("pkg:pypi/")]
    unhashed = [c["name"] for c in pypi if not c.get("hashes")]
    assert unhashed == [] and all(f"sha256:{c['hashes'][0]['content']}" in lock for c in pypi), unhashed
    files = {c["name"]: c for c in sbom["components"] if c["type"] == "file"}
    origin = {name: c["properties"][0]["value"] for name, c in files.items()}
    assert origin["/usr/include/python3.11/Python.h"] == "unpackaged"  # copied from the build
    assert origin["/usr/local/bin/pip"] == "unpackaged"
    assert origin["/usr/local/lib/rig/apt-install.sh"] == "unpackaged"
    assert origin["/etc/ssh/sshd_config"] == "unpackaged"  # made by openssh-server's postinst, then ours
    # A package's file the build changed: the shared objects docker/strip-debug.sh stripped.
    assert "changed (pypi torch)" in origin.values()
    assert not [n for n in files if n.startswith(("/proc/", "/tmp/", "/run/", "/opt/rig/sbom"))]
    assert "/usr/bin/tini" not in files  # a Debian package's, as installed
    assert "/usr/lib/x86_64-linux-gnu/libc.so.6" not in files  # libc6's, listed under /lib (merged /usr)
    # The hashes are the files' as the image holds them.
    checked = ["/usr/local/bin/pip", "/etc/ssh/sshd_config", "/usr/include/python3.11/Python.h"]
    rc, out = containers.oneshot(["sha256sum", *checked])
    assert rc == 0, out
    for line in out.strip().splitlines():
        digest, path = line.split()
        assert files[path]["hashes"] == [{"alg": "SHA-256", "content": digest}], path


# --- a published image on a host where no Python runs ---------------------------------------------


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.8) on a free loopback port, storing in tmp_path."""
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.skip("needs Debian's docker-registry (apt-get install docker-registry)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {tmp_path}/storage}}\n"
        f"  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (tmp_path / "registry.log").open("w")
    proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).status == 200, 30
        )
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


NO_PYTHON = """#!/bin/sh
echo "python ran: $0 $*" >>"{log}"
echo "ERROR test: no Python on this host" >&2
exit 127
"""

NO_BUILD = """#!/bin/sh
echo "docker $*" >>"{calls}"
for arg in "$@"; do
  case "$arg" in -*) ;; build|buildx) echo "docker $*" >>"{log}"; exit 99;; *) break;; esac
done
exec {docker} "$@"
"""


def pythons() -> list[str]:
    """Every Python executable on this host's usual paths and PATH (pyenv shims and versions too)."""
    folders = {*os.environ.get("PATH", "").split(":"), "/usr/bin", "/usr/local/bin", "/bin", "/opt/venv/bin"}
    folders |= {str(p) for p in (Path.home() / ".pyenv" / "versions").glob("*/bin")}
    found = set()
    for folder in filter(None, folders):
        for path in Path(folder).glob("python*"):
            if path.is_file() and os.access(path, os.X_OK) and not path.name.endswith("-config"):
                found.add(str(path.resolve()))
                found.add(str(path))
    return sorted(found)


def run_without_python(
    tmp: Path, argv: list[str], env: dict[str, str], timeout: int
) -> tuple[int, str, str, list[str]]:
    """argv in a mount namespace where each Python on the host is a stub that logs and fails, and
    docker refuses to build; returns (exit code, output, what the stubs refused, the docker calls)."""
    stubs = tmp / "stubs"
    stubs.mkdir()
    log = tmp / "forbidden.log"
    log.touch()
    (stubs / "python").write_text(NO_PYTHON.format(log=log))
    calls = tmp / "docker-calls.log"
    (stubs / "docker").write_text(NO_BUILD.format(log=log, calls=calls, docker=shutil.which("docker")))
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    binds = " && ".join(f"mount --bind {stubs / 'python'} {p}" for p in pythons()) or "true"
    # Python is there and fails (its stub's own line is then cleared), then the command runs.
    script = (
        f'{binds} && command -v python3 >/dev/null && ! python3 -c pass 2>/dev/null && : >{log} && exec "$@"'
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", script, "bash", *argv],
        cwd=REPO,
        env={**env, "PATH": f"{stubs}:{env['PATH']}"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    docker_calls = calls.read_text().splitlines() if calls.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, log.read_text(), docker_calls


def tags(registry: str) -> set[str]:
    with urllib.request.urlopen(f"http://{registry}/v2/yolo-rig/tags/list", timeout=10) as response:
        return set(json.load(response)["tags"])


def attestation(digest: str, public_key: Path, kind: str) -> dict[str, Any]:
    """The statement cosign verified for the digest (`cosign verify-attestation --type kind`)."""
    out = subprocess.run(
        ["cosign", "verify-attestation", "--key", str(public_key), "--insecure-ignore-tlog=true",
         "--type", kind, digest],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    statement: dict[str, Any] = json.loads(
        base64.b64decode(json.loads(out.stdout.splitlines()[0])["payload"])
    )
    return statement


def check_signed(digest: str, public_key: Path, image: str, sbom: dict[str, Any]) -> None:
    """The signature, and the SBOM and provenance attached to the digest, as a platform's admission
    policy would check them."""
    verify = subprocess.run(
        ["cosign", "verify", "--key", str(public_key), "--insecure-ignore-tlog=true", digest],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr
    statement = attestation(digest, public_key, "cyclonedx")
    assert statement["predicateType"] == "https://cyclonedx.org/bom"
    assert statement["predicate"] == sbom  # the image's own SBOM
    provenance = attestation(digest, public_key, "slsaprovenance1")
    assert provenance["predicateType"] == "https://slsa.dev/provenance/v1"
    assert provenance["subject"][0]["digest"]["sha256"] == digest.split(":")[-1]
    build = provenance["predicate"]["buildDefinition"]
    files = {d.get("name"): d["digest"] for d in build["resolvedDependencies"]}
    for name in ("Dockerfile", "uv.lock"):
        assert files[name] == {"sha256": hashlib.sha256((REPO / name).read_bytes()).hexdigest()}, name
    base = next(d for d in build["resolvedDependencies"] if d.get("uri", "").startswith("docker-image://"))
    assert f"sha256:{base['digest']['sha256']}" in subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}} {{.RepoDigests}}", base["uri"].split("//", 1)[1]],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert build["externalParameters"]["source"]["revision"] == revision.stdout.strip()
    args = build["externalParameters"]["buildArgs"]
    labels = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", image],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert args["STACK"] == json.loads(labels)["io.yolo-rig.stack"] and args["VERSION"] == VERSION
    assert "CA_BUNDLE" not in json.dumps(provenance) and "ca-certificates.crt" not in json.dumps(provenance)


@pytest.mark.slow
@needs_ssh_keygen
def test_a_published_image_is_signed_and_starts_verified_on_a_host_without_python(
    docker_client: Any, image: str, stack: str, registry: str, tmp_path: Path, sbom: dict[str, Any]
) -> None:
    """`make push` puts both tags in the registry, signs the digest and attaches the SBOM and the
    provenance; with the local tags gone and no Python on the host,
    `IMAGE=REGISTRY/yolo-rig@DIGEST COSIGN_PUBLIC_KEY=... make up` verifies it, pulls it, builds
    nothing, and SSH answers. The same tag pushed again after a layer change is refused."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ssh") is None:
        pytest.skip("needs root and unshare (a mount namespace hides Python), and the OpenSSH client")
    if shutil.which("cosign") is None:
        pytest.skip("needs cosign (.ci/provision.sh installs Debian trixie's package)")
    name, tag = image.rsplit(":", 1)
    make_env = {k: v for k, v in os.environ.items() if k not in {"IMAGE", "MAKEFLAGS", "MAKELEVEL"}}
    make_env["COSIGN_PASSWORD"] = "team secret"  # cosign reads the key's password from it
    keys = tmp_path / "cosign"
    subprocess.run(
        ["cosign", "generate-key-pair", "--output-key-prefix", str(keys)],
        env=make_env, capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    public_key = keys.with_suffix(".pub")
    push = subprocess.run(
        ["make", "-s", "push", f"IMAGE={name}", f"TAG={tag}", f"STACK={stack}", f"REGISTRY={registry}",
         f"COSIGN_KEY={keys.with_suffix('.key')}"],
        cwd=REPO, env=make_env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if "was built from revision" in push.stdout:
        pytest.skip(f"{image} was not built from this checkout: {push.stdout.strip()}")
    assert push.returncode == 0, push.stdout + push.stderr
    assert tags(registry) >= {stack, f"{VERSION}-{stack}"}  # and cosign's sha256-DIGEST.sig/.att
    # Pinned as docs/image.md says: by the digest `make push` printed, which no later push can move.
    pushed = docker_client.images.get(f"{registry}/yolo-rig:{VERSION}-{stack}").attrs["RepoDigests"]
    published = next(d for d in pushed if d.startswith(f"{registry}/yolo-rig@sha256:"))
    assert published in push.stdout, push.stdout
    assert f"INFO make: signed {published} and attached its SBOM (CycloneDX) and provenance" in push.stdout
    assert "team secret" not in push.stdout + push.stderr
    check_signed(published, public_key, image, sbom)
    for t in (stack, f"{VERSION}-{stack}"):
        docker_client.images.remove(f"{registry}/yolo-rig:{t}")

    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    project = unique("release")
    ssh_port = free_port()
    env = {
        **make_env,
        "COMPOSE_PROJECT_NAME": project,
        "SSH_PUBLIC_KEY": key.with_suffix(".pub").read_text().strip(),
        "SSH_PORT": str(ssh_port),
        "JUPYTER_PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
    }
    argv = ["make", "up", f"IMAGE={published}", f"STACK={stack}", "CPU_ONLY=yes", f"ENV_FILE={tmp_path}/env"]
    argv.append(f"COSIGN_PUBLIC_KEY={public_key}")
    try:
        rc, out, forbidden, calls = run_without_python(tmp_path, argv, env, timeout=600)
        assert forbidden == "", forbidden
        assert rc == 0, out[-4000:]
        assert f"INFO make: {published} is signed by {public_key}" in out, out[-4000:]
        assert f"docker pull {published}" in calls, calls
        assert docker_client.images.get(published).id == docker_client.images.get(image).id
        # What it runs, named so it can be checked: the digest and the revision it was built from.
        revision = docker_client.images.get(image).labels["org.opencontainers.image.revision"]
        assert f"INFO image: {published} {published}, revision {revision}" in out, out[-4000:]
        ssh = subprocess.run(
            ["ssh", "-p", str(ssh_port), "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             "yolo@127.0.0.1", "rig --version"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert ssh.returncode == 0, ssh.stderr
        assert ssh.stdout.startswith(f"yolo-rig {VERSION} (stack {stack}, "), ssh.stdout
        refused_altered_and_tags(docker_client, image, registry, stack, public_key, make_env, tmp_path)
    finally:
        take_down(project, env={**env, "IMAGE": published})
        for ref in (published, *(f"{registry}/yolo-rig:{t}" for t in (stack, f"{VERSION}-{stack}"))):
            subprocess.run(["docker", "rmi", ref], capture_output=True, timeout=60)


def refused_altered_and_tags(
    docker_client: Any,
    image: str,
    registry: str,
    stack: str,
    public_key: Path,
    env: dict[str, str],
    tmp: Path,
) -> None:
    """The release's tag pushed again after a layer change (its other layers already there: seconds):
    `make up` with its digest is one line and starts nothing; a tag cannot be verified at all."""
    altered = f"{registry}/yolo-rig:{VERSION}-{stack}"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {image}\nRUN echo altered > /etc/altered\n".encode()), tag=altered, rm=True
    )
    subprocess.run(["docker", "push", "--quiet", altered], capture_output=True, timeout=600, check=True)
    digest = next(d for d in docker_client.images.get(altered).attrs["RepoDigests"] if d.startswith(registry))
    project = unique("altered")
    try:
        for ref, expect in (
            (
                digest,
                f"ERROR make: {digest} is not signed by {public_key} (unsigned, altered or another signer's)",
            ),
            (altered, f"ERROR make: {altered} is a tag, which can move after it is verified"),
        ):
            up = subprocess.run(
                ["make", "-s", "up", f"IMAGE={ref}", f"STACK={stack}", "CPU_ONLY=yes", f"ENV_FILE={tmp}/env2",
                 f"COSIGN_PUBLIC_KEY={public_key}"],
                cwd=REPO, env={**env, "COMPOSE_PROJECT_NAME": project}, capture_output=True, text=True,
                timeout=300, check=False,
            )  # fmt: skip
            lines = (up.stdout + up.stderr).strip().splitlines()
            assert up.returncode != 0 and lines[0].startswith(expect), lines
            assert [line for line in lines if not line.startswith("make")] == lines[:1], lines
            if ref == digest:
                assert lines[0].endswith("cosign: error during command execution: no signatures found"), lines
        started = docker_client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
        assert started == []
    finally:
        take_down(project)  # nothing, unless a refusal came too late
        subprocess.run(["docker", "rmi", altered, digest], capture_output=True, timeout=60)


def documented_home_move() -> str:
    """The `docker run ... tar ...` command of docs/workstation.md's "Two stacks, two projects"."""
    text = (REPO / "docs" / "workstation.md").read_text()
    section = text.split("## Two stacks, two projects", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "docs/workstation.md shows no command to move a home"
    command = re.search(r"^docker run .*?'$", block[1].replace("\\\n", " "), re.M)
    assert command, block[1]
    return command[0]


def test_the_documented_home_move_keeps_the_home_and_leaves_the_packages(
    docker_client: Any, image: str, tmp_path: Path
) -> None:
    """The command docs/workstation.md gives, with this image and two fresh volumes: the files and
    their owners arrive, ~/.local's packages (built against the other stack's torch) do not."""
    old, new = unique("home-a"), unique("home-b")
    seed = (
        "mkdir -p /h/.ssh /h/.local/lib/python3.11/site-packages/pkg /h/.local/bin /h/.local/share/x "
        "&& echo hist >/h/.bash_history && echo 'alias ll=ls' >/h/.bashrc && touch /h/.local/bin/tool "
        "&& chown -R 1000:1000 /h && chmod 700 /h/.ssh"
    )
    try:
        docker_client.containers.run(
            image, ["-c", seed], entrypoint="bash", remove=True, network_mode="none",
            volumes={old: {"bind": "/h", "mode": "rw"}},
        )  # fmt: skip
        docker_client.volumes.create(new)
        command = (
            documented_home_move().replace("yolo-rig-cu121_home", old).replace("yolo-rig-cu128_home", new)
        )
        command = re.sub(r" yolo-rig:cu\d+ ", f" {image} ", command)
        result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        listing = docker_client.containers.run(
            image, ["-c", "cd /h && find . -printf '%p %u %m\\n' | sort"], entrypoint="bash", remove=True,
            network_mode="none", volumes={new: {"bind": "/h", "mode": "ro"}},
        ).decode()  # fmt: skip
        assert "./.bash_history yolo" in listing and "./.ssh yolo 700" in listing, listing
        assert "./.local/share/x yolo" in listing, listing
        assert ".local/lib" not in listing and ".local/bin" not in listing, listing
    finally:
        for volume in (old, new):
            subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True, timeout=60)
