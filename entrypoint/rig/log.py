"""The log contract: every line starts with INFO, WARNING or ERROR, then the component."""

import logging
import sys


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        component = record.name.removeprefix("rig.") if record.name != "rig" else "rig"
        return f"{record.levelname} {component}: {record.getMessage()}"


def setup(level: int = logging.INFO) -> None:
    """Send rig's log lines to stderr, once per process."""
    root = logging.getLogger("rig")
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


def get(name: str) -> logging.Logger:
    return logging.getLogger(f"rig.{name}")
