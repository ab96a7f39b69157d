"""The Makefile as a user calls it: one error line for a setting it does not know, the image named
from IMAGE (and pulled, not built, when published), the release's version and license, the folder
settings `make up` keeps in Compose's .env, a compose project per stack, and make train's metrics.

Docker is a stub on PATH here that records its calls (tests/image/test_release.py runs the real one)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import rig

from tests.helpers import REPO

STUB = """#!/bin/sh
echo "docker $*" >>"$DOCKER_LOG"
case "$*" in
  *"io.yolo-rig.stack"*) echo "${STUB_STACK:-cu121}" ;;
  *"image.revision"*) echo "${STUB_REVISION:-}" ;;
  "image inspect"*) [ -n "$STUB_IMAGE_MISSING" ] && exit 1 ;;
esac
exit 0
"""


NO_PYTHON = """#!/bin/sh
echo "$0 $*" >>"$PYTHON_LOG"
exit 127
"""


class Make:
    """`make ARGS` in the repository with the docker stub first on PATH (its calls in .calls()), and
    python, python3 and python3.11 stubs that fail and log (in .pythons())."""

    def __init__(self, tmp: Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "docker").write_text(STUB)
        for name in ("python", "python3", "python3.11"):
            (self.bin / name).write_text(NO_PYTHON)
        for stub in self.bin.iterdir():
            stub.chmod(0o755)
        self.log = tmp / "docker.log"
        self.python_log = tmp / "python.log"
        self.env_file = tmp / "env"
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in {"IMAGE", "STACK", "MAKEFLAGS", "MAKELEVEL"}},
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "DOCKER_LOG": str(self.log),
            "PYTHON_LOG": str(self.python_log),
        }

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "--no-print-directory", *args, f"ENV_FILE={self.env_file}"],
            cwd=REPO,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def show(self, *names: str, args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> list[str]:
        """The values of make variables as make computes them for `make ARGS`."""
        recipe = "; ".join(f"echo '$({n})'" for n in names)
        out = self("--eval", f"show: ; @{recipe}", "show", *args, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.splitlines()

    def commands(self, *args: str) -> list[str]:
        """The commands `make -n ARGS` would run, each on one line."""
        out = self("-n", *args)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout.replace("\\\n", " ").splitlines()

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def pythons(self) -> list[str]:
        return self.python_log.read_text().splitlines() if self.python_log.exists() else []


@pytest.fixture
def make(tmp_path: Path) -> Make:
    if shutil.which("make") is None:
        pytest.skip("needs GNU make")
    return Make(tmp_path)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["train", "GPU=2"],
            "ERROR make: GPU=2 is not a setting of this Makefile or compose.yaml; did you mean GPUS=2?",
        ),
        (["up", "DATASET_DIR=/data"], "ERROR make: DATASET_DIR=/data is not a setting"),
        (
            ["build", "STACK=cu999"],
            "ERROR make: STACK=cu999 is not a stack of pyproject.toml (one of: cu121 cu128)",
        ),
        (["push"], "ERROR make: give REGISTRY=host[:port][/path]"),
    ],
)
def test_a_wrong_setting_is_one_error_line_and_runs_nothing(make: Make, argv: list[str], line: str) -> None:
    result = make(*argv)
    assert result.returncode == 2, result.stdout + result.stderr
    first = (result.stdout + result.stderr).splitlines()[0]
    assert first.startswith(line), first
    assert make.calls() == []


def test_settings_of_compose_pass_on_the_command_line(make: Make) -> None:
    """Compose's own variables (SSH_PORT, SHM_SIZE...) are settings too: make hands them to compose."""
    result = make("-n", "down", "SSH_PORT=2300", "SHM_SIZE=4g", "CPU_ONLY=yes")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("args", "ref", "name", "policy"),
    [
        ((), "yolo-rig:cu121", "yolo-rig", "never"),
        (("IMAGE=yolo-rig-x", "STACK=cu128"), "yolo-rig-x:cu128", "yolo-rig-x", "never"),
        (("IMAGE=yolo-rig", "TAG=mine"), "yolo-rig:mine", "yolo-rig", "never"),
        (("IMAGE=registry.example.com/ml/yolo-rig",), "registry.example.com/ml/yolo-rig:cu121",
         "registry.example.com/ml/yolo-rig", "missing"),
        (("IMAGE=127.0.0.1:5000/yolo-rig:0.2.0-cu121",), "127.0.0.1:5000/yolo-rig:0.2.0-cu121",
         "127.0.0.1:5000/yolo-rig", "missing"),
        (("IMAGE=127.0.0.1:5000/yolo-rig@sha256:" + "a" * 64,), "127.0.0.1:5000/yolo-rig@sha256:" + "a" * 64,
         "127.0.0.1:5000/yolo-rig", "missing"),
    ],
)  # fmt: skip
def test_the_image_is_named_from_image_and_tag(
    make: Make, args: tuple[str, ...], ref: str, name: str, policy: str
) -> None:
    """A published name (with a registry or namespace) is pulled when missing; a local one built."""
    assert make.show("REF", "IMAGE_NAME", "PULL_POLICY", args=args) == [ref, name, policy]


def test_a_published_image_is_pulled_never_built(make: Make) -> None:
    image = "127.0.0.1:5000/yolo-rig:0.2.0-cu121"
    result = make("up", f"IMAGE={image}", "CPU_ONLY=yes", env={"STUB_IMAGE_MISSING": "1"})
    calls = make.calls()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"docker pull {image}" in calls
    assert not [c for c in calls if c.startswith(("docker build", "docker buildx"))], calls
    (up,) = [c for c in calls if c.endswith("up -d --wait")]
    assert "-f compose.yaml -f compose.cpu.yaml" in up


def test_an_image_of_another_stack_is_refused(make: Make) -> None:
    result = make("up", "IMAGE=reg.example/yolo-rig:0.2.0-cu128", env={"STUB_STACK": "cu128"})
    assert result.returncode == 2
    assert (
        "ERROR make: reg.example/yolo-rig:0.2.0-cu128 is of stack cu128, not STACK=cu121; add STACK=cu128"
        in (result.stdout)
    )
    assert not [c for c in make.calls() if " compose " in f" {c} "]


def test_push_sends_both_tags_of_an_image_built_from_this_checkout(make: Make) -> None:
    (revision,) = make.show("GIT_REVISION")
    (version,) = make.show("VERSION")
    result = make("push", "REGISTRY=127.0.0.1:5000/team", env={"STUB_REVISION": "0123456789ab"})
    assert result.returncode == 2
    assert f"was built from revision 0123456789ab, this checkout is {revision}" in result.stdout
    assert not [c for c in make.calls() if c.startswith("docker push")]

    make.log.unlink()
    result = make("push", "REGISTRY=127.0.0.1:5000/team", env={"STUB_REVISION": revision})
    assert result.returncode == 0, result.stdout + result.stderr
    pushes = [c for c in make.calls() if c.startswith("docker push")]
    assert pushes == [
        "docker push --quiet 127.0.0.1:5000/team/yolo-rig:cu121",
        f"docker push --quiet 127.0.0.1:5000/team/yolo-rig:{version}-cu121",
    ]


def test_the_version_is_pyprojects_and_the_changelogs(make: Make) -> None:
    (version,) = make.show("VERSION")
    assert make("-s", "version").stdout == f"{version}\n"  # what the release workflow compares its tag with
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'\nversion = "{version}"\n' in pyproject
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert rig.__version__ == version, "rig/__init__.py's __version__ differs from pyproject.toml's"
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == version, (
        f"CHANGELOG.md's newest release is {releases[:1]}, not {version}"
    )


def test_the_license_is_the_agpl_the_labels_name() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.split("\n", 2)[:2] == [
        "                    GNU AFFERO GENERAL PUBLIC LICENSE",
        "                       Version 3, 19 November 2007",
    ]
    assert "END OF TERMS AND CONDITIONS" in text
    assert 'license = "AGPL-3.0-only"' in (REPO / "pyproject.toml").read_text()
    assert 'org.opencontainers.image.licenses="AGPL-3.0-only"' in (REPO / "Dockerfile").read_text()


def test_folder_settings_are_kept_for_the_next_call(make: Make, tmp_path: Path) -> None:
    """`RUNS_DIR=~/runs make up`, then `make train`: the run lands in the folder, not the volume."""
    runs, data = tmp_path / "runs", tmp_path / "data"
    runs.mkdir()
    data.mkdir()
    make.env_file.write_text("SSH_PORT=2223\nRUNS_DIR=/old\n")
    result = make("save-settings", f"RUNS_DIR={runs}", f"DATASETS_DIR={data}", "RIG_UID=4321")
    assert result.returncode == 0, result.stderr
    assert "INFO make: saved in" in result.stdout
    lines = make.env_file.read_text().splitlines()
    assert sorted(lines) == sorted(
        ["SSH_PORT=2223", f"RUNS_DIR={runs}", f"DATASETS_DIR={data}", "RIG_UID=4321", "RIG_GID=4321"]
    )

    assert make.show("RUNS_DIR", "RIG_UID") == [str(runs), "4321"]
    # The environment and the command line still win, in make's order.
    assert make.show("RUNS_DIR", env={"RUNS_DIR": "/elsewhere"}) == ["/elsewhere"]
    (run,) = [line for line in make.commands("train", "CPU_ONLY=yes") if " run --rm " in line]
    assert (
        f"RUNS_DIR={runs}" in run and "-f compose.runs.yaml" in run and f"--env-file {make.env_file}" in run
    )

    # A value quoted by hand, as Compose allows, is read without its quotes.
    with make.env_file.open("a") as f:
        f.write(f'WEIGHTS_DIR="{data}"\n')
    assert make.show("WEIGHTS_DIR") == [str(data)]
    make.env_file.write_text("\n".join(lines) + "\n")

    # Unchanged settings leave the file alone; a setting given empty is dropped.
    assert "saved" not in make("save-settings").stdout
    make("save-settings", "RUNS_DIR=")
    assert sorted(make.env_file.read_text().splitlines()) == sorted(
        ["SSH_PORT=2223", f"DATASETS_DIR={data}", "RIG_UID=4321", "RIG_GID=4321"]
    )


def test_make_train_serves_the_metrics_it_prints(make: Make) -> None:
    commands = make.commands("train", "CPU_ONLY=yes", "TRAIN_METRICS_PORT=9555")
    assert any("INFO metrics: http://127.0.0.1:9555/metrics while this run trains" in c for c in commands)
    (run,) = [c for c in commands if " run --rm " in c]
    assert "-p 127.0.0.1:9555:9464" in run
    commands = make.commands("train", "CPU_ONLY=yes", "TRAIN_METRICS_PORT=0")
    assert not [c for c in commands if "metrics" in c or "-p 127.0.0.1" in c]


def test_each_stack_is_its_own_compose_project(make: Make) -> None:
    """Its own home (~/.local) and caches: packages built against one torch never load in the other."""
    if shutil.which("docker") is None:
        pytest.skip("needs the docker CLI (compose config reads the files; no engine)")
    for stack in ("cu121", "cu128"):
        commands = make.commands("up", f"STACK={stack}", "CPU_ONLY=yes", "IMAGE=reg.example/yolo-rig")
        (up,) = [c for c in commands if c.endswith("up -d --wait")]
        assert f"STACK={stack}" in up and f"IMAGE=reg.example/yolo-rig:{stack}" in up
        config = subprocess.run(
            ["docker", "compose", "-f", "compose.yaml", "config", "--format", "json"],
            cwd=REPO,
            env={
                k: v
                for k, v in {**os.environ, "STACK": stack}.items()
                if k not in {"IMAGE", "COMPOSE_PROJECT_NAME"}
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert f'"name": "yolo-rig-{stack}"' in config
        assert f'"image": "yolo-rig:{stack}"' in config
        assert f'"name": "yolo-rig-{stack}_home"' in config


@pytest.mark.parametrize(
    "argv",
    [
        ["build"],
        ["up"],
        ["down"],
        ["train"],
        ["demo-data"],
        ["weights", "W=yolo11n.pt"],
        ["shell"],
        ["push", "REGISTRY=r"],
    ],
)
def test_the_user_targets_need_no_python_on_the_host(make: Make, argv: list[str]) -> None:
    """What they would run, expanded and printed (`make -n`), with every python on PATH failing:
    nothing calls one, while expanding the Makefile or in a command (the build reads the lock itself;
    tests/image/test_release.py runs `make up` for real with no Python on the host)."""
    commands = make.commands(*argv, "CPU_ONLY=yes")
    assert make.pythons() == []
    assert commands and not [c for c in commands if re.search(r"\bpython", c)], commands


def test_make_up_of_a_pinned_digest_pulls_it_and_names_its_digest_and_revision(make: Make) -> None:
    image = "127.0.0.1:5000/yolo-rig@sha256:" + "b" * 64
    result = make("up", f"IMAGE={image}", "CPU_ONLY=yes", env={"STUB_IMAGE_MISSING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    calls = make.calls()
    assert f"docker pull {image}" in calls, calls
    (line,) = [c for c in calls if "INFO image:" in c]
    assert line.endswith(f" {image}") and "RepoDigests" in line and "image.revision" in line, line


COSIGN = """#!/bin/sh
echo "cosign $*" >>"$DOCKER_LOG"
if [ -n "$STUB_COSIGN_FAIL" ]; then
  echo "WARNING: Skipping tlog verification is an insecure practice" >&2
  echo "Error: no signatures found" >&2
  echo "error during command execution: no signatures found" >&2
  exit 10
fi
exit 0
"""


def test_a_published_image_is_verified_before_it_runs_and_refused_in_one_line(make: Make) -> None:
    (make.bin / "cosign").write_text(COSIGN)
    (make.bin / "cosign").chmod(0o755)
    pinned = "127.0.0.1:5000/yolo-rig@sha256:" + "a" * 64
    key = "COSIGN_PUBLIC_KEY=/keys/cosign.pub"
    refused = make("up", f"IMAGE={pinned}", "CPU_ONLY=yes", key, env={"STUB_COSIGN_FAIL": "1"})
    assert refused.returncode == 2
    assert refused.stdout.splitlines() == [
        f"ERROR make: {pinned} is not signed by /keys/cosign.pub (unsigned, altered or another signer's); "
        "cosign: error during command execution: no signatures found"
    ]
    calls = make.calls()
    assert calls == [f"cosign verify --key /keys/cosign.pub --insecure-ignore-tlog=true {pinned}"], calls
    # A tag could move between the check and the pull: refused before anything is asked.
    make.log.unlink()
    tag = make("train", "IMAGE=127.0.0.1:5000/yolo-rig:0.2.0-cu121", key)
    assert tag.returncode == 2 and "is a tag, which can move after it is verified" in tag.stdout
    assert make.calls() == []
    # Signed: verified, then pulled and started as before; keyless with an identity, Rekor checked.
    verified = make("up", f"IMAGE={pinned}", "CPU_ONLY=yes", key, env={"STUB_IMAGE_MISSING": "1"})
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"INFO make: {pinned} is signed by /keys/cosign.pub" in verified.stdout
    assert make.calls()[0].startswith("cosign verify") and f"docker pull {pinned}" in make.calls()
    make.log.unlink()
    identity = "COSIGN_IDENTITY=^https://github.com/o/r/.github/workflows/release.yml@refs/tags/v"
    assert make("up", f"IMAGE={pinned}", "CPU_ONLY=yes", identity).returncode == 0
    assert make.calls()[0] == (
        "cosign verify --certificate-identity-regexp ^https://github.com/o/r/.github/workflows/release.yml@refs/tags/v"
        f" --certificate-oidc-issuer https://token.actions.githubusercontent.com {pinned}"
    )


def test_push_says_when_it_signs_nothing_and_never_pushes_with_a_stale_provenance(
    make: Make, tmp_path: Path
) -> None:
    (revision,) = make.show("GIT_REVISION")
    env = {"STUB_REVISION": revision}
    result = make("push", "REGISTRY=127.0.0.1:5000/team", f"SBOM_DIR={tmp_path}", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is not signed: give COSIGN_KEY" in result.stdout.splitlines()[-1]
    # With a key: the provenance must be this image's (make build writes it), else nothing is pushed.
    (tmp_path / "yolo-rig-0.2.0-cu121.provenance.json").write_text('{\n  "imageId": "sha256:other"\n}\n')
    make.log.unlink()
    stale = make(
        "push", "REGISTRY=127.0.0.1:5000/team", f"SBOM_DIR={tmp_path}", "COSIGN_KEY=/k/cosign.key", env=env
    )
    assert stale.returncode == 2
    assert (
        "provenance.json is not yolo-rig:cu121's provenance; run make build STACK=cu121 again" in stale.stdout
    )
    assert not [c for c in make.calls() if c.startswith("docker push")]
    missing = make(
        "push",
        "REGISTRY=127.0.0.1:5000/team",
        f"SBOM_DIR={tmp_path}/none",
        "COSIGN_KEY=/k/cosign.key",
        env=env,
    )
    assert missing.returncode == 2 and "is not yolo-rig:cu121's provenance" in missing.stdout
