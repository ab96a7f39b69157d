"""The suite's end-of-run check (tests/conftest.py, tests/helpers/names.py): a run whose tests leave a
container, volume or network of their own behind fails, naming each; what another run on the same
engine has is never its business. Here against a stand-in `docker` that keeps its volumes in a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO
from tests.helpers.names import RUN_ENV

FAKE_DOCKER = """#!/bin/sh
# volume create/rm/ls kept in $FAKE_DOCKER_STATE; no containers, no networks
case "$1 $2" in
  "volume create") echo "$3" >>"$FAKE_DOCKER_STATE" ;;
  "volume rm") grep -vx "$3" "$FAKE_DOCKER_STATE" >"$FAKE_DOCKER_STATE.new"
               mv "$FAKE_DOCKER_STATE.new" "$FAKE_DOCKER_STATE" ;;
  "volume ls") cat "$FAKE_DOCKER_STATE" ;;
esac
"""

TEST = """
import subprocess
from tests.helpers.names import unique

def test_{what}():
    name = unique("{what}")
    subprocess.run(["docker", "volume", "create", name], check=True)
    if "{what}" == "tidy":
        subprocess.run(["docker", "volume", "rm", name], check=True)
"""


def run(tmp_path: Path, *tests: str, workers: int = 0) -> subprocess.CompletedProcess[str]:
    """pytest with the suite's conftest over one file per test in `tests` (`workers`: xdist's, as
    `make test` runs two), against the stand-in docker; another run's volume is there already."""
    bin_dir, state = tmp_path / "bin", tmp_path / "volumes"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    state.write_text("rig-test-0ther0-stop-12345678_datasets\nyolo-rig-cu121_home\n")
    for what in tests:
        (tmp_path / f"test_{what}.py").write_text(TEST.format(what=what))
    # The inner run makes its own id, and is no worker of this one's (xdist's PYTEST_* variables).
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV and not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(REPO), PATH=f"{bin_dir}:{env['PATH']}", FAKE_DOCKER_STATE=str(state))
    xdist = ["-n", str(workers), "--dist", "loadfile"] if workers else ["-p", "no:xdist"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", *xdist,
         "--rootdir", str(tmp_path), *(f"test_{w}.py" for w in tests)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_run_that_leaves_a_volume_fails_naming_it_and_no_other(tmp_path: Path) -> None:
    result = run(tmp_path, "leaky", "tidy", workers=2)  # each file in its own worker
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "2 passed" in out, out  # the tests themselves pass: the run fails at its end
    lines = out.splitlines()
    at = lines.index("ERROR tests: this run's tests left 1 behind in Docker:")
    left = lines[at + 1].strip()
    # The name carries the run's id, the same in both workers: the tidy one's volume is gone.
    assert left.startswith("volume rig-test-") and left.split("-")[3] == "leaky", left
    assert "rig-test-0ther0" not in out and "yolo-rig-cu121_home" not in out


def test_a_run_that_takes_down_what_it_starts_passes(tmp_path: Path) -> None:
    result = run(tmp_path, "tidy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "left" not in result.stdout
