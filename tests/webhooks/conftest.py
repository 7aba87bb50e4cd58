"""An app whose webhooks may reach loopback (where the test receivers listen), polling fast."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from litestar.testing import TestClient

from control_plane.app import create_app
from control_plane.entry.bootstrap import IssuedKey
from control_plane.settings import Settings
from tests.conftest import Api
from tests.e2e.test_relays import eventually as relays_eventually

FAST = {
    "webhook_private": "loopback",
    "webhook_poll_s": 0.05,
    "webhook_backoff_s": 0.2,
    "webhook_backoff_cap_s": 0.5,
    "webhook_timeout_s": 2.0,
    "schedule_poll_s": 0.1,
}


@contextmanager
def hooks_app(database_url: str, **settings: Any) -> Iterator[Api]:
    """The app with ``FAST`` settings, and ``settings`` over them."""
    app = create_app(Settings(database_url=database_url, **{**FAST, **settings}))
    with TestClient(app, raise_server_exceptions=False) as client:
        issued: list[IssuedKey] = app.state.issued_keys
        keys = {key.kind.value: key.token for key in issued}
        yield Api(client=client, keys=keys, database_url=database_url)


@pytest.fixture
def hooks_api(database_url: str) -> Iterator[Api]:
    with hooks_app(database_url) as api:
        yield api


def eventually(check: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    """``tests.e2e.test_relays.eventually`` with a webhook's patience: deliveries are retried
    with backoff, so 20 s, polled every 0.05 s."""
    relays_eventually(check, timeout=timeout, what=what, every=0.05)
