"""Events through relays and replicas, with faults: none lost, none counted twice."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PostgresDatabases, unavailable
from tests.e2e.test_relays import ControlPlane, eventually, start_control_plane, start_relay
from tests.processes import wait_http_ok

pytestmark = pytest.mark.e2e


def stored_ids(cp: ControlPlane) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        path = "/events?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        page = cp.api("GET", path).json()
        ids.extend(e["eventId"] for e in page["events"])
        cursor = page["nextCursor"]
        if not cursor:
            return ids


def test_relay_intake_paths_land_in_the_one_store(tmp_path: Path) -> None:
    cp = start_control_plane(f"sqlite:///{tmp_path / 'vane.db'}", tmp_path)
    relay = start_relay(cp.url, cp.keys["relay"], tmp_path / "relay")
    try:
        wait_http_ok(f"{relay.url}/readyz")  # it knows the keys once it has the snapshots
        server = {"Authorization": f"Bearer {cp.keys['server']}"}
        one = httpx.post(
            f"{relay.url}/api/v1/track", json={"unit": "u1", "event": "signup"}, headers=server
        )
        assert one.status_code == 200, one.text
        assert one.json() == {"accepted": 1, "duplicates": 0, "spooled": True}
        batch = [
            {
                "unit": "u2",
                "event": "purchase",
                "value": 4999,
                "currency": "EUR",
                "eventId": "order-1",
            }
        ] * 2
        assert (
            httpx.post(
                f"{relay.url}/api/v1/events", json={"events": batch}, headers=server
            ).status_code
            == 200
        )
        beacon = httpx.post(
            f"{relay.url}/sdk/v1/events?key={cp.keys['public']}",
            content=b'{"events": [{"unit": "visitor-9", "event": "cta_click", "props": {"variant": "b"}}]}',
            headers={"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://shop.example"},
        )
        assert beacon.status_code == 200, beacon.text
        assert beacon.headers["access-control-allow-origin"] == "https://shop.example"
        public = {"Authorization": f"Bearer {cp.keys['public']}"}
        behind = int(time.time() * 1000) - 3_600_000  # a browser whose clock is an hour slow
        sent_at = time.time() * 1000
        skewed = httpx.post(
            f"{relay.url}/sdk/v1/events",
            json={
                "events": [{"unit": "visitor-9", "event": "late", "ts": behind - 5000}],
                "sentAt": behind,
            },
            headers=public,
        )
        assert skewed.status_code == 200, skewed.text
        received_by = time.time() * 1000
        for bad_sent_at in (17, "now", 1.5):
            refused = httpx.post(
                f"{relay.url}/sdk/v1/events",
                json={"events": [{"unit": "visitor-9", "event": "x"}], "sentAt": bad_sent_at},
                headers=public,
            )
            assert refused.status_code == 422, refused.text
            assert [d["field"] for d in refused.json()["error"]["details"]] == ["sentAt"]
        bad = httpx.post(
            f"{relay.url}/api/v1/track",
            json={"unit": "u", "event": "e", "value": 49.99},
            headers=server,
        )
        assert bad.status_code == 422
        assert "4999" in bad.json()["error"]["details"][0]["message"]
        assert (
            httpx.post(
                f"{relay.url}/api/v1/track",
                json={"unit": "u", "event": "e"},
                headers={"Authorization": f"Bearer {cp.keys['public']}"},
            ).status_code
            == 403
        )

        def arrived() -> bool:
            total: int = cp.api("GET", "/events/stats").json()["total"]
            return total == 4

        eventually(arrived, what="relay forwarded the events")
        events = {e["event"]: e for e in cp.api("GET", "/events").json()["events"]}
        assert events["cta_click"]["source"] == "browser"
        assert events["cta_click"]["eventId"].startswith("browser:rly-")  # the browsers' namespace
        assert events["purchase"]["source"] == "server"
        assert events["purchase"]["value"] == 4999
        assert events["signup"]["source"] == "server"
        # read on the browser's clock, stored on the relay's: five seconds before it was sent
        assert sent_at - 5000 <= events["late"]["ts"] <= received_by - 5000
        metrics = httpx.get(f"{relay.url}/metrics").text
        assert "vane_relay_event_spool_events 0.0" in metrics
    finally:
        relay.process.stop()
        cp.process.stop()


def test_kill_relay_mid_stream_and_take_control_plane_away_nothing_lost_or_doubled(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'vane.db'}"
    cp = start_control_plane(database, tmp_path)
    cp_port = int(cp.url.rsplit(":", 1)[1])
    keys = cp.keys
    relay = start_relay(cp.url, keys["relay"], tmp_path / "relay")
    relay_port = int(relay.url.rsplit(":", 1)[1])
    headers = {"Authorization": f"Bearer {keys['server']}"}
    batches = [
        [
            {"unit": f"u{b}-{i}", "event": "purchase", "value": i, "eventId": f"b{b}-e{i}"}
            for i in range(50)
        ]
        for b in range(120)
    ]
    sent = {e["eventId"] for batch in batches for e in batch}
    done = threading.Event()
    errors: list[Any] = []

    def sender() -> None:
        # a well-behaved client: retries a batch until the relay acknowledges it
        with httpx.Client(timeout=5) as client:
            for batch in batches:
                for _attempt in range(600):
                    try:
                        response = client.post(
                            f"http://127.0.0.1:{relay_port}/api/v1/events",
                            json={"events": batch},
                            headers=headers,
                        )
                        if response.status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
                else:
                    errors.append(batch[0]["eventId"])
                time.sleep(0.01)
        done.set()

    thread = threading.Thread(target=sender, daemon=True)
    try:
        thread.start()
        time.sleep(0.6)
        relay.process.stop(signal.SIGKILL)  # mid-stream, spool and forwarder in flight
        cp.process.stop(signal.SIGKILL)  # and the control plane goes away too
        relay = start_relay(
            f"http://127.0.0.1:{cp_port}", keys["relay"], tmp_path / "relay", port=relay_port
        )
        time.sleep(1.5)  # the relay accepts and spools while upstream is down
        cp = start_control_plane(database, tmp_path, port=cp_port, keys=keys)
        assert done.wait(120), "sender did not finish"
        assert errors == []
        eventually(
            lambda: len(stored_ids(cp)) >= len(sent), timeout=60, what="all events forwarded"
        )
        time.sleep(1)  # anything extra would show up now
        ids = stored_ids(cp)
        assert len(ids) == len(set(ids)), "an event was stored twice"
        assert set(ids) == sent, f"lost: {len(sent - set(ids))}"
        stats = cp.api("GET", "/events/stats").json()
        assert stats["total"] == len(sent)
    finally:
        relay.process.stop()
        cp.process.stop()


@pytest.mark.postgres
def test_same_batches_on_two_replicas_at_once_are_stored_once(
    tmp_path: Path, postgres_databases: PostgresDatabases | None
) -> None:
    if postgres_databases is None:
        unavailable("PostgreSQL")
    assert postgres_databases is not None
    database = postgres_databases.new()
    first = start_control_plane(database, tmp_path)
    second = start_control_plane(database, tmp_path, keys=first.keys)
    headers = {"Authorization": f"Bearer {first.keys['server']}"}
    batches = [
        [{"unit": f"u{i}", "event": "e", "eventId": f"x{b}-{i}"} for i in range(200)]
        for b in range(10)
    ]
    acks: list[dict[str, int]] = []
    lock = threading.Lock()

    def send(url: str) -> None:
        with httpx.Client(timeout=30) as client:
            for batch in batches:
                ack = client.post(
                    f"{url}/api/v1/events", json={"events": batch}, headers=headers
                ).json()
                with lock:
                    acks.append(ack)

    try:
        threads = [
            threading.Thread(target=send, args=(cp.url,))
            for cp in (first, second)
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        total = sum(len(b) for b in batches)
        assert sum(a["accepted"] for a in acks) == total
        assert sum(a["duplicates"] for a in acks) == 3 * total
        ids = stored_ids(first)
        assert len(ids) == total
        assert len(set(ids)) == total
    finally:
        second.process.stop()
        first.process.stop()
        postgres_databases.drop(database)
