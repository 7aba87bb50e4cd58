"""VaneClient against a real HTTP event store on loopback."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shared.client import VaneClient
from tests.client.event_store import PUBLIC_KEY, SERVER_KEY, EventStore, Fault

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MakeClient = Callable[..., VaneClient]


@pytest.fixture
def make_client(store: EventStore) -> Iterator[MakeClient]:
    clients: list[VaneClient] = []

    def make(**options: Any) -> VaneClient:
        options.setdefault("flush_interval", 30.0)
        key = options.pop("key", SERVER_KEY)
        client = VaneClient(store.url, key, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close(timeout=1.0)


def test_sends_camel_case_events_with_generated_ids_and_timestamps(
    store: EventStore, make_client: MakeClient
) -> None:
    client = make_client()
    before = time.time_ns() // 1_000_000
    assert client.track(
        "user-42",
        "purchase",
        value=4999,
        currency="EUR",
        props={"plan": "pro"},
        url="/checkout",
        event_id="order-1001",
    )
    assert client.track("user-42", "signup", ts=1_700_000_000_000)
    assert client.track("user-43", "signup")
    assert client.flush(timeout=5)

    stored = list(store.events.values())
    assert stored[0] == {
        "unit": "user-42",
        "event": "purchase",
        "value": 4999,
        "currency": "EUR",
        "props": {"plan": "pro"},
        "url": "/checkout",
        "ts": stored[0]["ts"],
        "eventId": "order-1001",
    }
    assert before <= stored[0]["ts"] <= time.time_ns() // 1_000_000
    assert stored[1]["ts"] == 1_700_000_000_000
    assert set(stored[1]) == {"unit", "event", "ts", "eventId"}
    assert stored[1]["eventId"] != stored[2]["eventId"]
    assert (client.sent, client.queued, client.rejected, client.dropped) == (3, 0, 0, 0)


def test_base_url_may_already_end_with_the_api_prefix(store: EventStore) -> None:
    with VaneClient(store.url + "/api/v1/", SERVER_KEY) as client:
        client.track("u", "signup")
        assert client.flush(timeout=5)
    assert len(store.events) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": 49.99}, ValueError, "send minor units: 4999 for 49.99"),
        ({"value": True}, TypeError, "value must be an int"),
        ({"value": 2**53}, ValueError, "at most"),
        ({"value": "4999"}, TypeError, "value must be an int"),
        ({"ts": 1.5}, TypeError, "epoch milliseconds"),
        ({"currency": "eur"}, ValueError, "ISO 4217"),
        ({"currency": "EU1"}, ValueError, "ISO 4217"),
        ({"currency": "ABC"}, ValueError, "ISO 4217"),  # the server's list, not any 3 capitals
        ({"currency": ["EUR"]}, ValueError, "ISO 4217"),
        ({"props": ["a"]}, TypeError, "props must be a mapping"),
        ({"url": 3}, TypeError, "url must be a string"),
        ({"event_id": ""}, TypeError, "event_id"),
    ],
)
def test_track_refuses_malformed_events(
    make_client: MakeClient, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    client = make_client()
    with pytest.raises(error, match=message):
        client.track("user-1", "purchase", **kwargs)
    assert client.queued == 0


@pytest.mark.parametrize(("unit", "event"), [("", "e"), ("u", ""), (None, "e"), ("u", 7)])
def test_track_needs_unit_and_event(make_client: MakeClient, unit: Any, event: Any) -> None:
    client = make_client()
    with pytest.raises((TypeError, ValueError)):
        client.track(unit, event)


def test_batches_by_size(store: EventStore, make_client: MakeClient) -> None:
    client = make_client(batch_size=10, flush_interval=60.0)
    for i in range(30):
        client.track(f"u{i}", "signup")
    assert store.wait_for_events(30, timeout=10)
    assert [len(r.event_ids) for r in store.answered] == [10, 10, 10]


def test_batches_by_interval(store: EventStore, make_client: MakeClient) -> None:
    client = make_client(batch_size=500, flush_interval=0.2)
    started = time.monotonic()
    for i in range(3):
        client.track(f"u{i}", "signup")
    assert store.wait_for_events(3, timeout=10)
    assert time.monotonic() - started >= 0.1  # sent by the timer, not by size
    assert [len(r.event_ids) for r in store.answered] == [3]


def test_flush_waits_until_acknowledged(store: EventStore, make_client: MakeClient) -> None:
    client = make_client(flush_interval=60.0)
    for i in range(10):
        client.track(f"u{i}", "signup")
    assert client.queued == 10
    assert client.flush(timeout=5)
    assert len(store.events) == 10
    assert client.queued == 0
    assert client.flush(timeout=5)  # nothing queued: returns at once


def test_flush_times_out_while_the_server_holds(store: EventStore, make_client: MakeClient) -> None:
    client = make_client()
    store.hold()
    client.track("u", "signup")
    assert not client.flush(timeout=0.2)
    store.release()
    assert client.flush(timeout=5)


def test_every_event_stored_exactly_once_through_transient_failures(
    store: EventStore, make_client: MakeClient
) -> None:
    # Lost answers (stored, then 503), plain 503s and dropped connections, interleaved.
    for fault in (
        Fault(503, store_first=True),
        Fault(503),
        Fault(drop_connection=True),
        Fault(502, store_first=True),
        Fault(drop_connection=True, store_first=True),
    ):
        store.fail(1, fault)
    client = make_client(batch_size=100)
    for i in range(1000):
        client.track(f"u{i}", "signup", value=i)
    assert client.flush(timeout=30)

    ids = [event_id for r in store.answered if r.status == 200 for event_id in r.event_ids]
    assert len(store.events) == 1000
    assert sorted(e["value"] for e in store.events.values()) == list(range(1000))
    assert client.retries == 5
    # The first batch was stored by the first fault, so its final answer is all duplicates.
    assert (client.sent, client.duplicates) == (1000, 100)
    assert len(set(ids)) == 1000
    assert (client.rejected, client.dropped, client.queued) == (0, 0, 0)


def test_retries_after_503(store: EventStore, make_client: MakeClient) -> None:
    store.fail(3, Fault(503))
    client = make_client()
    client.track("u", "signup")
    assert client.flush(timeout=10)
    assert [r.status for r in store.answered] == [503, 503, 503, 200]
    assert client.retries == 3
    assert len({tuple(r.event_ids) for r in store.answered}) == 1  # the same batch each time


def test_429_waits_for_retry_after(store: EventStore, make_client: MakeClient) -> None:
    store.fail(1, Fault(429, retry_after="1"))
    client = make_client()
    client.track("u", "signup")
    assert client.flush(timeout=10)
    first, second = store.answered
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.95
    assert client.retries == 1


def test_422_batch_is_rejected_and_not_retried(
    store: EventStore, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    store.fail(
        1,
        Fault(
            422,
            body={
                "error": {
                    "code": "validation_error",
                    "message": "batch refused",
                    "details": [{"field": "events", "message": "no"}],
                }
            },
        ),
    )
    client = make_client()
    for i in range(5):
        client.track(f"u{i}", "signup")
    with caplog.at_level(logging.WARNING, logger="vane.client"):
        assert not client.flush(timeout=5)
    assert [r.status for r in store.answered] == [422]
    assert (client.rejected, client.sent, client.retries, client.queued) == (5, 0, 0, 0)
    assert "validation_error: batch refused" in caplog.text

    client.track("u", "signup")  # the client moves on
    assert client.flush(timeout=5)
    assert len(store.events) == 1


def test_422_naming_events_rejects_only_those(store: EventStore, make_client: MakeClient) -> None:
    store.refused_names = {"bad"}
    client = make_client()
    for i in range(6):
        client.track(f"u{i}", "bad" if i in (1, 4) else "signup")
    assert not client.flush(timeout=5)
    assert [r.status for r in store.answered] == [422, 200]
    assert sorted(e["unit"] for e in store.events.values()) == ["u0", "u2", "u3", "u5"]
    assert (client.rejected, client.sent) == (2, 4)


@pytest.mark.parametrize(("key", "status"), [("ssk_live_unknown", 401), (PUBLIC_KEY, 403)])
def test_refused_key_is_permanent(
    store: EventStore,
    make_client: MakeClient,
    caplog: pytest.LogCaptureFixture,
    key: str,
    status: int,
) -> None:
    client = make_client(key=key)
    client.track("u", "signup")
    with caplog.at_level(logging.WARNING, logger="vane.client"):
        assert not client.flush(timeout=5)
    assert [r.status for r in store.answered] == [status]
    assert client.rejected == 1
    assert f"HTTP {status}" in caplog.text


def test_413_splits_the_batch(store: EventStore, make_client: MakeClient) -> None:
    store.max_body = 3000
    client = make_client()
    for i in range(10):
        client.track(f"u{i}", "signup", props={"note": "x" * 500})
    assert client.flush(timeout=10)
    assert len(store.events) == 10
    assert 413 in [r.status for r in store.answered]
    assert client.rejected == 0


def test_oversized_props_are_refused_locally(
    store: EventStore, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client()
    client.track("u1", "signup")
    client.track("u2", "signup", props={"blob": "x" * (17 << 10)})
    client.track("u3", "signup", props={"fn": object()})  # not JSON
    with caplog.at_level(logging.WARNING, logger="vane.client"):
        assert not client.flush(timeout=5)
    assert sorted(e["unit"] for e in store.events.values()) == ["u1"]
    assert client.rejected == 2
    assert "props are over" in caplog.text


def test_bounded_queue_drops_and_counts(store: EventStore, make_client: MakeClient) -> None:
    client = make_client(batch_size=1, max_queue=5)
    store.hold()
    assert client.track("u0", "signup")
    assert store.wait_for(lambda s: s.holding == 1)  # the sender is stuck on that one
    assert all(client.track(f"u{i}", "signup") for i in range(1, 6))
    assert not client.track("u6", "signup")
    assert not client.track("u7", "signup")
    assert (client.dropped, client.queued) == (2, 6)
    store.release()
    assert client.flush(timeout=10)
    assert len(store.events) == 6


def test_max_retries_gives_up(store: EventStore, make_client: MakeClient) -> None:
    store.fail(100, Fault(503))
    client = make_client(max_retries=2)
    client.track("u", "signup")
    assert not client.flush(timeout=10)
    assert (client.retries, client.dropped, client.queued) == (2, 1, 0)
    assert len(store.answered) == 3


def test_close_flushes_and_is_idempotent(store: EventStore) -> None:
    client = VaneClient(store.url, SERVER_KEY, flush_interval=60.0)
    for i in range(25):
        client.track(f"u{i}", "signup")
    client.close()
    assert len(store.events) == 25
    assert not client.track("late", "signup")
    assert client.dropped == 1
    client.close()
    assert not client._thread.is_alive()
    assert client._http.is_closed


def test_context_manager_closes(store: EventStore) -> None:
    with VaneClient(store.url, SERVER_KEY, flush_interval=60.0) as client:
        client.track("u", "signup")
    assert len(store.events) == 1
    assert not client._thread.is_alive()


def test_close_gives_up_at_its_deadline(store: EventStore) -> None:
    store.fail(1000, Fault(503))
    client = VaneClient(store.url, SERVER_KEY, flush_interval=60.0)
    for i in range(10):
        client.track(f"u{i}", "signup")
    started = time.monotonic()
    client.close(timeout=0.5)
    assert time.monotonic() - started < 2.0
    assert (client.dropped, client.queued, client.sent) == (10, 0, 0)
    assert client.retries >= 1


def test_close_wakes_a_long_backoff(store: EventStore) -> None:
    store.fail(1, Fault(429, retry_after="30"))
    client = VaneClient(store.url, SERVER_KEY, flush_interval=60.0)
    client.track("u", "signup")
    assert not client.flush(timeout=0.3)  # now sleeping 30 s before the retry
    started = time.monotonic()
    client.close(timeout=1.0)  # retries at half the time left rather than after 30 s
    assert time.monotonic() - started < 2.0
    assert len(store.events) == 1


def test_generated_event_ids_are_unique(store: EventStore, make_client: MakeClient) -> None:
    store.hold()  # each sender is stuck on its first batch: the rest stays in the queues
    ids: list[str] = []
    for _ in range(2):  # two instances, as two processes (or restarts) would have
        client = make_client(batch_size=1000, max_queue=100_000)
        for i in range(100_000):
            assert client.track("u", "e", ts=i)
        ids += [item[7] for item in list(client._queue) if isinstance(item, tuple)]
    store.release()
    assert len(ids) >= 198_000
    assert len(set(ids)) == len(ids)


def test_flushes_on_normal_exit(store: EventStore) -> None:
    script = textwrap.dedent(
        f"""
        from shared.client import VaneClient
        client = VaneClient({store.url!r}, {SERVER_KEY!r}, flush_interval=60.0)
        for i in range(1000):
            client.track(f"user-{{i}}", "signup")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert len(store.events) == 1000
    assert done.stderr == ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forked_child_gets_its_own_sender(store: EventStore, make_client: MakeClient) -> None:
    client = make_client()
    for i in range(10):
        client.track(f"parent-{i}", "signup")
    parent_prefix = client._id_prefix
    pid = os.fork()
    if pid == 0:  # the child: its own queue, thread and connections
        code = 1
        try:
            ok = client._id_prefix != parent_prefix and client.queued == 0
            for i in range(5):
                client.track(f"child-{i}", "signup")
            code = 0 if ok and client.flush(timeout=10) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client.flush(timeout=10)
    units = sorted(e["unit"] for e in store.events.values())
    assert units == sorted([f"parent-{i}" for i in range(10)] + [f"child-{i}" for i in range(5)])


def test_many_threads_track_concurrently(store: EventStore, make_client: MakeClient) -> None:
    client = make_client(batch_size=200, flush_interval=0.05)

    def work(n: int) -> None:
        for i in range(2000):
            client.track(f"t{n}-{i}", "signup")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert client.flush(timeout=30)
    assert len(store.events) == 16_000
    assert client.sent == 16_000
