"""The one wait: poll a condition until it holds or a deadline passes, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(condition: Callable[[], Any], timeout: float = 15, interval: float = 0.2) -> Any:
    """Poll until condition() is truthy; return its value or fail the test with the last error."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # the condition may fail until the service is up
            last_error = e
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s (last error: {last_error!r})")
