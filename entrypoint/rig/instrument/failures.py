"""What a sampler survives, counted, so that a broken one shows: the first failure is said when it
happens (one INFO line), and at the end of the run how many there were and the last one ("GPU sampling
failed 12 times: ..."). Never one line per sample, never none."""

from __future__ import annotations

import logging
import threading


class Failures:
    """The failures of one sampler over one run. `goes_on`: what the first line adds (what the run
    does without the samples)."""

    def __init__(self, what: str, logger: logging.Logger, goes_on: str) -> None:
        self.what = what
        self.count = 0
        self.last = ""
        self._logger = logger
        self._goes_on = goes_on
        self._lock = threading.Lock()

    def add(self, error: str) -> None:
        with self._lock:
            self.count += 1
            self.last = error
            first = self.count == 1
        if first:
            self._logger.info("%s; %s", error, self._goes_on)

    def report(self) -> None:
        """At the end of the run: the count and the last failure (a single one was said already);
        then the count starts again for the next run."""
        with self._lock:
            count, last = self.count, self.last
            self.count, self.last = 0, ""
        if count > 1:
            self._logger.info("%s failed %d times: %s", self.what, count, last)
