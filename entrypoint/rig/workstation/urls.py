"""How to come in: the SSH line and JupyterLab's URL with the token of the server that runs now.

`rig serve` logs these lines and writes them to a root-only file for `make up` (URLS_FILE). A
generated token is new at every start of the server, so the lines are made again at each: `lines`
decides them (pure), `Board` logs and writes them (thin), warning once when the file cannot be
written (a full disk must not stop the workstation, nor fill its log).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rig import log, paths, safefs

URLS_FILE = paths.RUN / "urls"
_logger = log.get("serve")


@dataclass(frozen=True)
class Entrances:
    ssh: str | None  # the SSH line; None: no key and no password, nobody logs in
    jupyter_url: str | None  # JupyterLab's address; None: not served
    token_set: bool  # the user set the token (JUPYTER_TOKEN[_FILE]): it is not printed


def lines(entrances: Entrances, token: str | None) -> list[str]:
    """The lines for this moment: the server's current token in its URL, unless the user set it."""
    out = [entrances.ssh] if entrances.ssh else []
    if entrances.jupyter_url:
        if entrances.token_set:
            out.append(f"JupyterLab: {entrances.jupyter_url} (token: the one you set)")
        elif token:
            out.append(f"JupyterLab: {entrances.jupyter_url}?token={token} (a new token at every start)")
    return out


@dataclass
class Board:
    """Logs the lines and writes them to `path` (0600, root's) whenever they change."""

    entrances: Entrances
    path: Path = URLS_FILE
    _unwritten: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def publish(self, token: str | None = None) -> Sequence[str]:
        with self._lock:  # the supervisor starts services from its loop; one writer at a time anyway
            now = lines(self.entrances, token)
            for line in now:
                _logger.info("%s", line)
            try:
                safefs.write_file(self.path, "".join(f"{line}\n" for line in now).encode(), 0o600)
            except OSError as e:
                if not self._unwritten:
                    why = e.strerror or e
                    _logger.warning("cannot write %s (%s): `make up` prints no URLs", self.path, why)
                self._unwritten = True
            else:
                self._unwritten = False
            return now
