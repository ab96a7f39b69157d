"""The suite's own guard (tests/conftest.py): a test that changes the process's environment or working
folder without monkeypatch fails, and the next test in the same process (a pytest-xdist worker runs many
files one after another) does not see the change."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

LEAKY = """
import os

def test_one_leaves_a_variable_and_a_folder(tmp_path):
    os.environ["RIG_TEST_LEAK"] = "1"
    os.chdir(tmp_path)

def test_the_next_finds_neither():
    assert "RIG_TEST_LEAK" not in os.environ
    assert os.getcwd() == os.environ["RIG_TEST_START"]
"""


def test_a_change_one_test_leaves_fails_it_and_never_reaches_the_next(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(tmp_path / "test_leaky.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "RIG_TEST_START": str(tmp_path)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = run.stdout + run.stderr
    # The first fails at its teardown, the next passes: it found neither the variable nor the folder.
    assert "2 passed, 1 error" in out, out
    assert "ERROR test_leaky.py::test_one_leaves_a_variable_and_a_folder" in out, out
    assert "the test left the environment changed (RIG_TEST_LEAK)" in out, out
