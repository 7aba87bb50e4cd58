from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.event_store import EventStore, RunningStore


@pytest.fixture
def store() -> Iterator[EventStore]:
    with RunningStore() as running:
        yield running
