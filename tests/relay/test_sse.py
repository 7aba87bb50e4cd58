"""The OFREP change stream: tokens, refetch events on swap, revocation, disconnects."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import msgspec
import pytest
import uvicorn

from relay.routes.sse import EventStreams, StreamTokens
from shared.wire.protocol import Access
from tests.relay.helpers import (
    ENV,
    LISTED,
    LISTED_ORIGIN,
    PUBLIC,
    PUBLIC_ID,
    Relay,
    StreamDriver,
    auth,
    build_snapshot,
    make_relay,
    public_access,
)

pytestmark = pytest.mark.anyio

EVENTS = "/ofrep/v1/events"
ORIGIN = "https://app.example.com"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def streams_of(relay: Relay) -> EventStreams:
    handler: Any = relay.app.router.exact[EVENTS].handlers["GET"]  # type: ignore[attr-defined]
    streams = handler.__self__
    assert isinstance(streams, EventStreams)
    return streams


async def stream_url(relay: Relay, token: str = PUBLIC, origin: str = ORIGIN) -> str:
    async with relay.client() as client:
        response = await client.post(
            "/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=auth(token, Origin=origin),
        )
    assert response.status_code == 200
    url: str = response.json()["eventStreams"][0]["url"]
    return url


def events_in(chunk: bytes) -> list[dict[str, Any]]:
    """Parse the ``id:``/``data:`` events in a chunk (comments and retry lines skipped)."""
    events = []
    for block in chunk.decode().split("\n\n"):
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("id", "data"):
                fields[name] = value
        if "data" in fields:
            events.append({"id": fields.get("id"), **json.loads(fields["data"])})
    return events


async def open_stream(
    relay: Relay, url: str, origin: str = ORIGIN, extra: tuple[tuple[str, str], ...] = ()
) -> StreamDriver:
    parts = urlsplit(url)
    driver = StreamDriver(relay.app, parts.path, parts.query, headers=(("Origin", origin), *extra))
    await driver.start()
    return driver


async def test_stream_sends_refetch_on_swap() -> None:
    relay = make_relay()
    driver = await open_stream(relay, await stream_url(relay))
    assert driver.status == 200
    assert driver.headers["content-type"].startswith("text/event-stream")
    assert driver.headers["cache-control"].startswith("no-cache")
    assert driver.headers["access-control-allow-origin"] == ORIGIN
    first = await driver.read()
    assert first.startswith(b"retry: ")
    assert events_in(first) == []

    for version in (2, 3):
        state = relay.swap(build_snapshot(version))
        chunk = await driver.read(wait_s=1.0)
        assert events_in(chunk) == [
            {
                "id": str(version),
                "type": "refetchEvaluation",
                "etag": state.etag,
                "lastModified": state.snapshot.generated_at // 1000,
            }
        ]
    await driver.disconnect()
    assert streams_of(relay).hub.open_streams() == 0


async def test_other_environments_do_not_wake_the_stream() -> None:
    relay = make_relay(keepalive_s=0.2)
    driver = await open_stream(relay, await stream_url(relay))
    await driver.read()
    staging = msgspec.structs.replace(build_snapshot(9), environment="staging")
    relay.swap(staging, Access())
    assert await driver.read(wait_s=1.0) == b": keep-alive\n\n"
    await driver.disconnect()


async def test_keepalive_comment() -> None:
    relay = make_relay(keepalive_s=0.05)
    driver = await open_stream(relay, await stream_url(relay))
    await driver.read()
    assert await driver.read() == b": keep-alive\n\n"
    assert await driver.read() == b": keep-alive\n\n"
    await driver.disconnect()


async def test_stream_closes_when_key_is_revoked() -> None:
    relay = make_relay()
    driver = await open_stream(relay, await stream_url(relay))
    await driver.read()
    without_public = Access(keys=tuple(k for k in public_access().keys if k.id != PUBLIC_ID))
    relay.swap(build_snapshot(2), without_public)
    assert await driver.read(wait_s=1.0) == b""
    assert driver.finished
    assert driver.task is not None
    await asyncio.wait_for(driver.task, 1)
    assert streams_of(relay).hub.open_streams() == 0
    # Reconnecting with the same URL is refused now.
    parts = urlsplit(await stream_url(relay, token=LISTED, origin=LISTED_ORIGIN))
    revoked = StreamDriver(relay.app, parts.path, parts.query)
    revoked.scope["query_string"] = driver.scope["query_string"]
    await revoked.start()
    assert revoked.status == 401


async def test_missed_version_is_sent_at_once() -> None:
    relay = make_relay()
    url = await stream_url(relay)  # computed at version 1
    state = relay.swap(build_snapshot(2))
    driver = await open_stream(relay, url)
    first = await driver.read()
    assert first.startswith(b"retry: ")
    assert events_in(first) == [
        {
            "id": "2",
            "type": "refetchEvaluation",
            "etag": state.etag,
            "lastModified": state.snapshot.generated_at // 1000,
        }
    ]
    await driver.disconnect()
    # An EventSource reconnecting with the current version's id gets no event.
    current = await open_stream(relay, url, extra=(("Last-Event-ID", "2"),))
    assert events_in(await current.read()) == []
    await current.disconnect()


async def test_disconnect_cleans_up() -> None:
    relay = make_relay()
    url = await stream_url(relay)
    drivers = [await open_stream(relay, url) for _ in range(3)]
    hub = streams_of(relay).hub
    assert hub.open_streams() == 3
    for driver in drivers:
        await driver.read()
        await driver.disconnect()
    assert hub.open_streams() == 0
    assert all(d.task is not None and d.task.done() for d in drivers)
    relay.swap(build_snapshot(2))  # nobody left to notify; nothing breaks


def forge(secret: bytes, environment: str, key_id: str, expiry: int) -> str:
    claims = json.dumps([environment, key_id, expiry], separators=(",", ":")).encode()
    signature = hmac.digest(secret, claims, "sha256")

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return f"{b64(claims)}.{b64(signature)}"


async def test_stream_token_checks() -> None:
    relay = make_relay()
    secret = relay.settings.sse_secret
    future = int(time.time()) + 300
    cases = {
        "": 401,
        "token=": 401,
        "token=garbage": 401,
        "token=a.b": 401,
        f"token={forge(b'wrong-secret', ENV, PUBLIC_ID, future)}": 401,
        f"token={forge(secret, ENV, PUBLIC_ID, int(time.time()) - 1)}": 401,  # expired
        f"token={forge(secret, ENV, 'key_unknown', future)}": 401,
        f"token={forge(secret, 'staging', PUBLIC_ID, future)}": 503,  # no such state
        f"token={forge(secret, ENV, PUBLIC_ID, future)}": 200,
    }
    for query, status in cases.items():
        driver = StreamDriver(relay.app, EVENTS, query, headers=(("Origin", ORIGIN),))
        await driver.start()
        assert driver.status == status, query
        assert driver.headers["access-control-allow-origin"] == ORIGIN
        if status != 200:
            body = json.loads(await driver.body())
            assert body["errorCode"] == "GENERAL"
        await driver.disconnect()


async def test_stream_respects_the_allow_list() -> None:
    relay = make_relay()
    url = await stream_url(relay, token=LISTED, origin=LISTED_ORIGIN)
    refused = await open_stream(relay, url, origin=ORIGIN)
    assert refused.status == 403
    assert "access-control-allow-origin" not in refused.headers
    allowed = await open_stream(relay, url, origin=LISTED_ORIGIN)
    assert allowed.status == 200
    await allowed.disconnect()


def test_tokens() -> None:
    tokens = StreamTokens(b"s", ttl_s=600)
    now = 1_800_000_123.0
    token = tokens.issue(ENV, PUBLIC_ID, now)
    assert tokens.issue(ENV, PUBLIC_ID, now + 1) == token  # cached within the window
    assert tokens.verify(token, now) == (ENV, PUBLIC_ID)
    assert tokens.verify(token, now + 300) == (ENV, PUBLIC_ID)  # at least ttl/2 left
    assert tokens.verify(token, now + 601) is None  # never more than ttl
    assert StreamTokens(b"other", 600).verify(token, now) is None
    later = tokens.issue(ENV, PUBLIC_ID, now + 300)
    assert later != token
    assert tokens.verify(later, now + 600) == (ENV, PUBLIC_ID)


# ------------------------------------------------------------------- over a real socket


@contextlib.asynccontextmanager
async def serve(relay: Relay) -> AsyncIterator[str]:
    config = uvicorn.Config(
        relay.app, host="127.0.0.1", port=0, lifespan="off", ws="none", log_level="error"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 5)


async def test_stream_over_http() -> None:
    relay = make_relay()
    async with serve(relay) as base, httpx.AsyncClient(base_url=base, timeout=5) as client:
        bulk = await client.post(
            "/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=auth(Origin=ORIGIN),
        )
        url = bulk.json()["eventStreams"][0]["url"]
        assert url.startswith(base + EVENTS)
        assert parse_qs(urlsplit(url).query)["token"][0]
        async with client.stream("GET", url, headers={"Origin": ORIGIN}) as stream:
            assert stream.status_code == 200
            assert stream.headers["access-control-allow-origin"] == ORIGIN
            chunks = stream.aiter_raw()
            assert (await anext(chunks)).startswith(b"retry: ")
            state = relay.swap(build_snapshot(2))
            event = await asyncio.wait_for(anext(chunks), 1)
            assert events_in(event)[0]["etag"] == state.etag
            # revoke: the server ends the response
            keys = tuple(k for k in public_access().keys if k.id != PUBLIC_ID)
            relay.swap(build_snapshot(3), Access(keys=keys))
            rest = [chunk async for chunk in chunks]
            assert b"".join(rest) == b""
        refetch = await client.post(
            "/ofrep/v1/evaluate/flags",
            json={"context": {"targetingKey": "u"}},
            headers=auth(LISTED),
        )
        assert refetch.json()["metadata"] == {"version": 3}
    assert streams_of(relay).hub.open_streams() == 0


async def test_client_going_away_over_http() -> None:
    relay = make_relay()
    hub = streams_of(relay).hub
    async with serve(relay) as base, httpx.AsyncClient(base_url=base, timeout=5) as client:
        url = await stream_url(relay)
        url = base + url[len("http://relay.test") :]
        async with client.stream("GET", url) as stream:
            await anext(stream.aiter_raw())
            assert hub.open_streams() == 1
        for _ in range(100):
            if hub.open_streams() == 0:
                break
            await asyncio.sleep(0.01)
        assert hub.open_streams() == 0
