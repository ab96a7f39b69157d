"""Fixtures shared by the workstation's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.logrecords import Records, capture


@pytest.fixture
def records() -> Iterator[Records]:
    with capture() as handler:
        yield handler
