"""AsyncVaneClient against the same real event store (asyncio.run inside plain tests)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from shared.client import AsyncVaneClient
from tests.client.event_store import SERVER_KEY, EventStore, Fault


def client_for(store: EventStore, **options: Any) -> AsyncVaneClient:
    options.setdefault("flush_interval", 30.0)
    return AsyncVaneClient(store.url, SERVER_KEY, **options)


def test_flush_sends_and_waits(store: EventStore) -> None:
    async def main() -> None:
        async with client_for(store) as client:
            assert client.track("user-42", "purchase", value=4999, currency="EUR", event_id="o-1")
            for i in range(9):
                assert client.track(f"u{i}", "signup")
            assert client.queued == 10
            assert await client.flush(timeout=5)
            assert len(store.events) == 10
            assert (client.sent, client.queued) == (10, 0)

    asyncio.run(main())
    assert store.events["o-1"]["value"] == 4999
    assert len({e["eventId"] for e in store.events.values()}) == 10


def test_events_tracked_before_the_loop_runs_are_sent(store: EventStore) -> None:
    client = client_for(store)
    client.track("early", "signup")  # no running loop yet: queued only

    async def main() -> None:
        async with client:
            client.track("later", "signup")

    asyncio.run(main())
    assert sorted(e["unit"] for e in store.events.values()) == ["early", "later"]


def test_batches_by_size_and_by_interval(store: EventStore) -> None:
    async def main() -> None:
        async with client_for(store, batch_size=10, flush_interval=0.2) as client:
            for i in range(23):
                client.track(f"u{i}", "signup")
            assert await asyncio.to_thread(store.wait_for_events, 23)

    asyncio.run(main())
    assert [len(r.event_ids) for r in store.answered] == [10, 10, 3]


def test_every_event_stored_once_through_transient_failures(store: EventStore) -> None:
    store.fail(1, Fault(503, store_first=True))
    store.fail(1, Fault(drop_connection=True))
    store.fail(1, Fault(503))

    async def main() -> AsyncVaneClient:
        async with client_for(store, batch_size=50) as client:
            for i in range(200):
                client.track(f"u{i}", "signup")
            assert await client.flush(timeout=30)
        return client

    client = asyncio.run(main())
    assert len(store.events) == 200
    assert (client.sent, client.duplicates, client.retries) == (200, 50, 3)


def test_429_waits_for_retry_after(store: EventStore) -> None:
    store.fail(1, Fault(429, retry_after="1"))

    async def main() -> AsyncVaneClient:
        async with client_for(store) as client:
            client.track("u", "signup")
            assert await client.flush(timeout=10)
        return client

    client = asyncio.run(main())
    first, second = store.answered
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.95
    assert client.retries == 1


def test_422_is_rejected_not_retried(store: EventStore, caplog: pytest.LogCaptureFixture) -> None:
    store.refused_names = {"bad"}

    async def main() -> AsyncVaneClient:
        async with client_for(store) as client:
            client.track("u1", "bad")
            with caplog.at_level(logging.WARNING, logger="vane.client"):
                assert not await client.flush(timeout=5)
        return client

    client = asyncio.run(main())
    assert [r.status for r in store.answered] == [422]
    assert (client.rejected, client.retries, client.sent) == (1, 0, 0)
    assert "events[0].event" in caplog.text


def test_bounded_queue_drops_and_counts(store: EventStore) -> None:
    async def main() -> AsyncVaneClient:
        async with client_for(store, max_queue=3) as client:
            results = [client.track(f"u{i}", "signup") for i in range(5)]
            assert results == [True, True, True, False, False]
        return client

    client = asyncio.run(main())
    assert (client.dropped, client.sent) == (2, 3)


def test_flush_times_out_while_the_server_holds(store: EventStore) -> None:
    async def main() -> None:
        async with client_for(store) as client:
            store.hold()
            client.track("u", "signup")
            assert not await client.flush(timeout=0.2)
            store.release()
            assert await client.flush(timeout=5)

    asyncio.run(main())


def test_aclose_flushes_is_idempotent_and_refuses_later_events(store: EventStore) -> None:
    async def main() -> AsyncVaneClient:
        client = client_for(store)
        for i in range(25):
            client.track(f"u{i}", "signup")
        await client.aclose()
        assert not client.track("late", "signup")
        await client.aclose()
        return client

    client = asyncio.run(main())
    assert len(store.events) == 25
    assert (client.sent, client.dropped) == (25, 1)


def test_aclose_gives_up_at_its_deadline(store: EventStore) -> None:
    store.fail(1000, Fault(503))

    async def main() -> AsyncVaneClient:
        client = client_for(store)
        for i in range(10):
            client.track(f"u{i}", "signup")
        await client.aclose(timeout=0.5)
        return client

    started = time.monotonic()
    client = asyncio.run(main())
    assert time.monotonic() - started < 2.0
    assert (client.dropped, client.queued, client.sent) == (10, 0, 0)
