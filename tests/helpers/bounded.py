"""A call that must not block: the tests of inputs that would hang (FIFOs, held locks)."""

from __future__ import annotations

import threading
from typing import Any


def bounded(fn: Any, seconds: float = 20) -> Any:
    """fn's result (or its exception), failing the test instead of hanging when fn blocks."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")
