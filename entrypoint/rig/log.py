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


def printable(text: str | bytes) -> str:
    """Text as one harmless log line: bytes that are not UTF-8 as \\xNN, control and format characters
    (escape sequences, a carriage return, bidi overrides) escaped, so nothing a user names or prints
    can move the cursor, forge a line or hide one in `docker logs` or a terminal."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def get(name: str) -> logging.Logger:
    return logging.getLogger(f"rig.{name}")
