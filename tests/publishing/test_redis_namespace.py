"""Two deployments sharing one Redis never hear each other's changes (found from outside: the
channel was ``vane:changes`` for every deployment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from litestar.testing import TestClient

from control_plane.app import create_app
from control_plane.publishing.change import Change
from control_plane.publishing.publisher import RedisPublisher
from control_plane.settings import Settings
from tests.conftest import REDIS_URL, require_redis
from tests.e2e.test_relays import eventually

pytestmark = pytest.mark.redis


def test_each_deployment_publishes_on_its_own_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_redis()
    watcher = redis.Redis.from_url(REDIS_URL).pubsub()  # type: ignore[no-untyped-call]
    watcher.psubscribe("vane:*")
    heard: dict[str, list[Change]] = {"a": [], "b": []}
    channels: dict[str, str] = {}
    clients: dict[str, TestClient[Any]] = {}
    try:
        for name in ("a", "b"):
            # each deployment migrated its own database (not copies of one, as the suite's
            # template databases are: a copy keeps the id it was made with)
            app = create_app(
                Settings(database_url=f"sqlite:///{tmp_path / name}.db", redis_url=REDIS_URL)
            )
            client = TestClient(app, raise_server_exceptions=False).__enter__()
            clients[name] = client
            publisher: RedisPublisher = app.state.publisher

            async def deliver(change: Change, name: str = name) -> None:
                heard[name].append(change)

            monkeypatch.setattr(publisher, "deliver", deliver)  # what its hub is handed
            eventually(publisher.subscribed.is_set)
            channels[name] = publisher.channel
            token = next(k.token for k in app.state.issued_keys if k.kind.value == "management")
            created = client.post(
                "/api/v1/flags",
                json={"key": "kill"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert created.status_code == 201, created.text

        published: set[str] = set()

        def both_published() -> bool:
            message = watcher.get_message(timeout=0.1)
            if message is not None and message["type"] == "pmessage":
                published.add(message["channel"].decode())
            return published >= {channels["a"], channels["b"]}

        eventually(both_published, what=lambda: f"published on {published}, {channels}")
        assert channels["a"] != channels["b"]
        # each hub applied its own change only, never the other deployment's
        projects = {name: {change.project_id for change in heard[name]} for name in heard}
        assert len(projects["a"]) == len(projects["b"]) == 1
        assert projects["a"] != projects["b"]
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)
        watcher.close()
