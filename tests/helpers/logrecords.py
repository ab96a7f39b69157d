"""rig's log records as a test sees them, whether or not log.setup() has stopped their propagation."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class Records(logging.Handler):
    """Every record of the "rig" logger while attached (see capture)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, level: int) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records if r.levelno == level]

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == logging.WARNING]


@contextmanager
def capture() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("rig")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
