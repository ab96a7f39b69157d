"""What the trainer's parts log, read from rig's logger itself (log.setup stops it propagating)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.logrecords import Records, capture


@pytest.fixture
def logged() -> Iterator[Records]:
    with capture() as records:
        yield records
