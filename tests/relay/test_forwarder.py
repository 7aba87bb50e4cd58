"""The forwarder against a control plane that applies the real event rules (issue #33).

The fake upstream decodes and checks each body with ``shared.wire.events.decode_batch``, as the
control plane's ``POST /api/v1/events`` does, answers 413 above its body limit and 422 with the
items' field paths, and stores by ``eventId``. Every event spooled ends up stored once or set
aside in ``rejected.jsonl`` with its reason; nothing is retried for ever.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.app import RelayApp
from relay.forwarder import Forwarder
from relay.spool import Spool
from shared.wire import events
from shared.wire.events import EventIn
from tests.relay.helpers import build_snapshot, public_access
from tests.relay.helpers import settings as relay_settings


def _error(status: int, message: str, details: list[tuple[str, str]]) -> httpx.Response:
    body = {
        "error": {
            "code": "validation_error" if status == 422 else "too_large",
            "message": message,
            "details": [{"field": f, "message": m} for f, m in details],
        }
    }
    return httpx.Response(status, json=body)


class FakeControlPlane:
    def __init__(
        self,
        max_body: int = 1 << 20,
        refuse_whole: Callable[[list[EventIn]], bool] = lambda _: False,
    ) -> None:
        self.max_body = max_body
        self.refuse_whole = refuse_whole  # a 422 that names no item
        self.stored: dict[str, EventIn] = {}
        self.answers: list[int] = []
        self.status: int | None = None  # answer this to everything

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = self._answer(request.content)
        self.answers.append(response.status_code)
        return response

    def _answer(self, raw: bytes) -> httpx.Response:
        if self.status is not None:
            return httpx.Response(self.status, json={})
        if len(raw) > self.max_body:
            return _error(413, "request body is too large", [])
        items, problems = events.decode_batch(raw, time.time_ns() // 1_000_000)
        if problems:
            return _error(422, f"{problems[0][0]}: {problems[0][1]}", problems)
        if self.refuse_whole(items):
            return _error(422, "events: refused", [("events", "refused as a whole")])
        duplicates = 0
        for item in items:
            assert item.event_id is not None
            if item.event_id in self.stored:
                duplicates += 1
            self.stored.setdefault(item.event_id, item)
        return httpx.Response(
            200, json={"accepted": len(items) - duplicates, "duplicates": duplicates}
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))


def event(i: int, **extra: Any) -> dict[str, Any]:
    return {"unit": f"u{i}", "event": "viewed", "eventId": f"e{i}", "source": "server", **extra}


def rejected(spool_dir: Path) -> list[dict[str, Any]]:
    path = spool_dir / "rejected.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def forward(
    tmp_path: Path, upstream: FakeControlPlane, records: list[list[dict[str, Any]]], **options: Any
) -> Forwarder:
    """Spool ``records`` (one append each), forward until the spool is empty."""
    spool = Spool(tmp_path)
    spool.start()
    for record in records:
        await spool.append(record)
    client = upstream.client()
    forwarder = Forwarder(relay_settings(**options), spool, client)
    task = asyncio.create_task(forwarder.run())
    try:
        for _ in range(2000):
            if not spool.pending_events:
                break
            await asyncio.sleep(0.005)
        assert spool.pending_events == 0, f"not forwarded; answers {upstream.answers[-5:]}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await spool.stop()
        await client.aclose()
    return forwarder


def test_a_413_halves_the_batch_until_it_passes_and_lowers_the_bound(tmp_path: Path) -> None:
    upstream = FakeControlPlane(max_body=64 * 1024)
    records = [
        [event(r * 10 + i, props={"blob": "x" * 15_000}) for i in range(10)] for r in range(3)
    ]
    records.append([event(999)])
    forwarder = asyncio.run(forward(tmp_path, upstream, records))
    assert sorted(upstream.stored) == sorted(e["eventId"] for r in records for e in r)
    assert rejected(tmp_path) == []
    assert 413 in upstream.answers
    assert 32 * 1024 < forwarder.max_body_bytes <= 64 * 1024
    assert forwarder.set_aside == {"too_large": 0, "refused": 0}


def test_batches_stay_below_the_configured_body_limit(tmp_path: Path) -> None:
    upstream = FakeControlPlane(max_body=64 * 1024)
    records = [
        [event(r * 10 + i, props={"blob": "x" * 15_000}) for i in range(10)] for r in range(3)
    ]
    asyncio.run(forward(tmp_path, upstream, records, upstream_max_body_bytes=64 * 1024))
    assert len(upstream.stored) == 30
    assert set(upstream.answers) == {200}  # the relay knew the limit: no 413 at all


def test_an_event_alone_over_the_limit_is_set_aside_and_the_rest_stored(tmp_path: Path) -> None:
    upstream = FakeControlPlane(max_body=8 * 1024)
    records = [[event(1), event(2, props={"blob": "y" * 10_000}), event(3)], [event(4)]]
    forwarder = asyncio.run(forward(tmp_path, upstream, records))
    assert sorted(upstream.stored) == ["e1", "e3", "e4"]
    [line] = rejected(tmp_path)
    assert [e["eventId"] for e in line["events"]] == ["e2"]
    assert line["status"] == 413
    assert "body limit" in line["reason"]
    assert forwarder.set_aside["too_large"] == 1
    # every 413 was to a body over the limit: halved, the bound stays above half of it
    assert 4 * 1024 < forwarder.max_body_bytes <= 8 * 1024


def test_a_422_sets_aside_only_the_items_it_names_and_resends_the_rest(tmp_path: Path) -> None:
    upstream = FakeControlPlane()
    good = [event(i) for i in range(50)]
    bad = [event(100, unit="n\x00ul"), event(101, eventId="x" * 201)]
    records = [good[:20], [bad[0]], good[20:40], [bad[1]], good[40:]]
    forwarder = asyncio.run(forward(tmp_path, upstream, records))
    assert sorted(upstream.stored) == sorted(e["eventId"] for e in good)
    lines = rejected(tmp_path)
    assert sorted(e["unit"] for line in lines for e in line["events"]) == ["n\x00ul", "u101"]
    reasons = " ".join(line["reason"] for line in lines)
    assert "unit: must not contain NUL" in reasons
    assert "eventId: at most 200 characters" in reasons
    assert forwarder.set_aside["refused"] == 2
    assert upstream.answers == [422, 200]  # the rest at once, in one more request


def test_a_422_naming_no_item_halves_until_the_refused_event_is_alone(tmp_path: Path) -> None:
    upstream = FakeControlPlane(refuse_whole=lambda items: any(i.unit == "poison" for i in items))
    good = [event(i) for i in range(40)]
    records = [good[:25], [event(500, unit="poison")], good[25:]]
    forwarder = asyncio.run(forward(tmp_path, upstream, records))
    assert sorted(upstream.stored) == sorted(e["eventId"] for e in good)
    [line] = rejected(tmp_path)
    assert [e["unit"] for e in line["events"]] == ["poison"]
    assert "refused as a whole" in line["reason"] or "events: refused" in line["reason"]
    assert forwarder.splits > 0
    assert forwarder.set_aside["refused"] == 1


def test_refused_items_reads_only_the_batch_items() -> None:
    problems = [("events[3].unit", "bad"), ("events[3].eventId", "long"), ("events[0]", "x")]
    assert events.refused_items(problems, 5) == {3: ["unit: bad", "eventId: long"], 0: ["x"]}
    assert events.refused_items([("events", "too many")], 5) is None
    assert events.refused_items([("sentAt", "bad")], 5) is None
    assert events.refused_items([("events[7].unit", "bad")], 5) is None  # not of this batch
    assert events.refused_items([], 5) is None


def test_readyz_is_not_ready_with_the_reason_once_forwarding_stalls(tmp_path: Path) -> None:
    upstream = FakeControlPlane()
    upstream.status = 500
    client = upstream.client()
    app = RelayApp(
        relay_settings(data_dir=tmp_path, forward_stall_s=0.2, backoff_cap_s=0.05),
        events_client=client,
    )

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response, str]:
        app.store.swap(_state())
        app.store.connected = True
        app.store.upstream_alive()
        app.spool.start()
        task = asyncio.create_task(app.forwarder.run())
        local = httpx.AsyncClient(transport=httpx.ASGITransport(app=app.http), base_url="http://r")
        try:
            ready = await local.get("/readyz")
            await app.spool.append([event(1), event(2)])
            await asyncio.sleep(0.5)
            stalled = await local.get("/readyz")
            metrics = (await local.get("/metrics")).text
            upstream.status = None  # the control plane takes events again
            for _ in range(400):
                if not app.spool.pending_events:
                    break
                await asyncio.sleep(0.005)
            recovered = await local.get("/readyz")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await app.spool.stop()
            await local.aclose()
            await client.aclose()
            app.spool_lock.release()
        return ready, stalled, recovered, metrics

    ready, stalled, recovered, metrics = asyncio.run(scenario())
    assert ready.status_code == 200, ready.text
    assert stalled.status_code == 503
    body = stalled.json()
    assert body["ready"] is False
    assert "answered 500" in body["notReady"]["forwarder"]
    assert body["forwarder"]["stalled"] is True
    assert body["forwarder"]["oldestPendingSeconds"] > 0
    assert "vane_relay_forward_stalled_seconds" in metrics
    assert 'vane_relay_events_set_aside{reason="too_large"} 0.0' in metrics
    assert recovered.status_code == 200, recovered.text
    assert "notReady" not in recovered.json()


def _state() -> Any:
    from relay.store import EnvironmentState

    return EnvironmentState.build(build_snapshot(), public_access())


# --- relay-made exposures pass the control plane's rules, whatever the unit ----------------------

KINDS = st.sampled_from([None, "organization", "device"])
KEYS = st.from_regex(r"[a-z0-9_.-]{1,128}", fullmatch=True)


def _passes_upstream(record: dict[str, Any]) -> bool:
    """What the control plane would answer the relay's forwarded body (spooled as msgpack)."""
    spooled = msgspec.msgpack.decode(msgspec.msgpack.encode([record]))
    raw = msgspec.json.encode({"events": spooled})
    items, problems = events.decode_batch(raw, time.time_ns() // 1_000_000)
    return not problems and all(not events.sender_problems(i, "relay") for i in items)


@settings(max_examples=300, deadline=None)
@given(unit=st.text(max_size=260), kind=KINDS, key=KEYS, variation=st.integers(0, 10**6))
def test_a_relay_made_exposure_is_never_refused_upstream(
    unit: str, kind: str | None, key: str, variation: int
) -> None:
    now = time.time_ns() // 1_000_000
    qualified = unit if kind is None else f"{kind}:{unit}"
    flag_id = events.exposure_event_id("flagexp", key, qualified, str(variation))
    exp_id = events.exposure_event_id("exp", key, qualified)
    assert flag_id == events.exposure_event_id("flagexp", key, qualified, str(variation))
    props_flag = {"flag": key, "variation": variation}
    props_exp = {"experiment": key, "variant": "control"}
    for name, event_id, props in (
        (events.FLAG_EXPOSURE, flag_id, props_flag),
        (events.EXPERIMENT_EXPOSURE, exp_id, props_exp),
    ):
        record = events.recorded_exposure(name, unit, kind, event_id, props, now)
        plain = EventIn(unit=unit, unit_kind=kind, event="viewed")
        try:
            msgspec.json.encode(plain)
            valid_unit = not events.check_event(plain, now)
        except UnicodeEncodeError:
            valid_unit = False
        if record is None:
            assert not valid_unit  # only a unit no event may have goes unrecorded
        else:
            assert _passes_upstream(record)
            assert len(record["eventId"]) <= events.MAX_TEXT


def test_short_exposure_ids_are_unchanged_and_long_ones_hashed() -> None:
    assert events.exposure_event_id("exp", "hero", "u-1") == "exp:hero:u-1"
    assert events.exposure_event_id("flagexp", "f", "org:a", "2") == "flagexp:f:org:a:2"
    long_unit = "u" * 195
    hashed = events.exposure_event_id("exp", "hero", long_unit)
    assert hashed.startswith("exp#:hero:")
    assert len(hashed) <= events.MAX_TEXT
    assert hashed == events.exposure_event_id("exp", "hero", long_unit)  # retries de-duplicate
    assert hashed != events.exposure_event_id("exp", "hero", long_unit + "v")
