"""Whether a run would die with the connection that started it, and the one line that says so.

A `rig train` started in an SSH session or a Jupyter terminal gets SIGHUP when the connection drops
or the laptop sleeps. It stops cleanly then (it keeps `last.pt`), but it stops: a day-long run
belongs in tmux or screen. Said once, before the launch, only where it is true: attached to a
terminal of an SSH session or a Jupyter terminal, outside tmux and screen, and not under nohup.
`make train`'s one-shot container (a terminal, but no session to drop) and scripts stay quiet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

HINT = (
    "a dropped connection stops this run (it keeps last.pt); run it inside `tmux new -s train` "
    "to survive disconnects (detach with Ctrl-b d, come back with `tmux attach -t train`)"
)


def has_terminal() -> bool:
    """Whether this process has a controlling terminal: its hang-up (SIGHUP) reaches the run even
    when the output goes to a file."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


def at_risk(environ: Mapping[str, str], on_terminal: bool, hangup_ignored: bool) -> bool:
    """The run shares the fate of an SSH connection or a Jupyter terminal tab."""
    if not on_terminal or hangup_ignored:  # a script, a pipe, nohup
        return False
    if environ.get("TMUX") or environ.get("STY"):  # tmux, screen
        return False
    # sshd sets SSH_TTY for a session with a terminal; Jupyter's terminals set JUPYTER_SERVER_ROOT.
    return bool(environ.get("SSH_TTY") or environ.get("JUPYTER_SERVER_ROOT"))
