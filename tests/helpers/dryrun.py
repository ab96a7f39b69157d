"""`rig train --dry-run` read back: the environment and the trainer's arguments it would run with."""

from __future__ import annotations

import shlex
import sys

import pytest
from rig import cli


def dry_run(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, str], dict[str, str], str]:
    """(the environment set, the trainer's key=value arguments, stderr) of the planned command."""
    assert cli.main(["train", "--dry-run", *argv]) == 0
    printed = capsys.readouterr()
    words = shlex.split(printed.out.strip())
    env = dict(a.split("=", 1) for a in words[1 : words.index(sys.executable)])
    args = dict(a.split("=", 1) for a in words[words.index("rig.launch.trainer") + 1 :])
    return env, args, printed.err
