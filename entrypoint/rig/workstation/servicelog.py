"""A service's output, line by line, into rig's log: levelled, and bounded whatever the service writes.

JupyterLab's stdout is inherited by every kernel it starts, so a notebook can write anything to it,
gigabytes without a newline included. The supervisor runs as root: its memory must not depend on
that. Reads are fixed-size chunks; a line is kept up to MAX_LINE bytes, then logged with a marker,
and the rest of it is dropped chunk by chunk until its newline. Control characters (a carriage
return, terminal escape sequences) are written escaped, so a line stays one line, as it was printed.
"""

from __future__ import annotations

import logging
import os
import re
from typing import IO

from rig import log

MAX_LINE = 8 * 1024  # bytes of one line that reach the log
CHUNK = 64 * 1024  # one read: a pipe's default capacity


class Lines:
    """Bytes in, complete lines out; holds at most `max_line` bytes between calls."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self.marker = f" [...] (line cut at {max_line} bytes, the rest dropped)".encode()
        self.buf = bytearray()
        self.dropping = False  # inside an over-long line, already logged: skip to its newline

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if not self.dropping:
                room = self.max_line - len(self.buf)
                self.buf += data[start : start + min(room, end - start)]
                if end - start > room:
                    out.append(bytes(self.buf) + self.marker)
                    self.buf.clear()
                    self.dropping = True
            if newline < 0:
                break
            if self.dropping:
                self.dropping = False
            else:
                out.append(bytes(self.buf))
                self.buf.clear()
            start = newline + 1
        return out

    def flush(self) -> list[bytes]:
        """What is left at the end of the stream: an unterminated last line."""
        rest = [bytes(self.buf)] if self.buf and not self.dropping else []
        self.buf.clear()
        self.dropping = False
        return rest


def classify(line: str) -> tuple[int, str]:
    """The level of one line a service printed, and the line without its own timestamp."""
    m = _JUPYTER.match(line)
    if m:
        text = f"{m['app']}: {m['msg']}" if m["app"] else m["msg"]
        return _LETTER_LEVELS.get(m["level"], logging.INFO), text
    m = _ABSL.match(line)
    if m:
        return _LETTER_LEVELS.get(m["level"], logging.INFO), m["msg"]
    lowered = line.lower()
    if lowered.startswith(("error:", "fatal:", "traceback (most recent call last)")):
        return logging.ERROR, line
    if lowered.startswith("warning:") or re.search(r"\b\w+Warning: ", line):
        return logging.WARNING, line
    return logging.INFO, line


# Jupyter: "[W 2026-11-29 14:00:00.123 ServerApp] message"; absl (TensorBoard): "W1129 14:00:00.1 f.py:1] m".
_JUPYTER = re.compile(r"^\[(?P<level>[DIWEC]) [\d\- :.]+(?: (?P<app>[\w.]+))?\] (?P<msg>.*)$")
_ABSL = re.compile(r"^(?P<level>[DIWEF])\d{4} [\d:.]+\s+(?:\d+\s+)?\S+\] (?P<msg>.*)$")
_LETTER_LEVELS = {"D": logging.DEBUG, "I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR}
_LETTER_LEVELS.update(C=logging.CRITICAL, F=logging.CRITICAL)


def _emit(raw: bytes, logger: logging.Logger) -> None:
    # Escaped: a kernel's \r or escape sequence must not rewrite what `docker logs` shows on a terminal.
    line = log.printable(raw.rstrip())
    if line:
        level, text = classify(line)
        logger.log(level, "%s", text)


def pump(stream: IO[bytes], logger: logging.Logger) -> None:
    """Log what `stream` (a pipe) carries until its end, then close it."""
    lines = Lines()
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, CHUNK):
            for raw in lines.feed(chunk):
                _emit(raw, logger)
        for raw in lines.flush():
            _emit(raw, logger)
    finally:
        stream.close()
