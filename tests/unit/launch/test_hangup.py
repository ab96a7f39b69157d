"""The one line that says a run dies with its connection: only where that is true."""

from __future__ import annotations

import pytest
from rig.launch import hangup

SSH = {"SSH_TTY": "/dev/pts/0", "SSH_CONNECTION": "10.0.0.2 5000 10.0.0.3 2222"}
JUPYTER = {"JUPYTER_SERVER_ROOT": "/workspace"}


@pytest.mark.parametrize(
    ("environ", "on_terminal", "hangup_ignored", "expected"),
    [
        (SSH, True, False, True),  # `ssh -t host rig train ...` or an interactive SSH shell
        (JUPYTER, True, False, True),  # a Jupyter terminal
        ({**SSH, "TMUX": "/tmp/tmux-1000/default,12,0"}, True, False, False),
        ({**SSH, "STY": "123.pts-0.host"}, True, False, False),  # screen
        (SSH, True, True, False),  # nohup
        (SSH, False, False, False),  # no terminal: a script, a pipe
        ({"SSH_CONNECTION": "10.0.0.2 5000 10.0.0.3 2222"}, False, False, False),  # `ssh host cmd`
        ({}, True, False, False),  # `make train`'s one-shot container: a terminal, no session
    ],
    ids=["ssh", "jupyter", "tmux", "screen", "nohup", "no-terminal", "ssh-command", "make-train"],
)
def test_at_risk(environ: dict[str, str], on_terminal: bool, hangup_ignored: bool, expected: bool) -> None:
    assert hangup.at_risk(environ, on_terminal, hangup_ignored) is expected
