"""Run an action as user yolo in a child process with a deadline: how root acts on the user's files.

The child drops to yolo's ids before it touches anything, so a link planted in the user's folders
leads nowhere yolo could not go anyway, and a child stuck on what a user left there (a FIFO, a huge
tree) is killed at the deadline instead of holding the services back.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from rig import log
from rig.workstation import users

_logger = log.get("users")


def run_as(ids: users.Ids, action: Callable[[], object], timeout: float, what: str) -> bool:
    """action() in a child that is yolo (ids); returns whether it finished in time."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            users.drop_privileges(ids)
            action()
            code = 0
        except BaseException as e:  # the parent only sees the exit code; say why here
            _logger.warning("%s failed: %s", what, e)
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    _logger.warning("%s took longer than %.0f s; skipped", what, timeout)
    return False
