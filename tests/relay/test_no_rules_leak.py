"""No relay response ever carries rules: clause attributes, operators, segment keys or members,
rule ids, or anything of a flag the caller may not see."""

from __future__ import annotations

from urllib.parse import urlsplit

import msgspec
import pytest

from tests.relay.helpers import (
    LISTED,
    LISTED_ORIGIN,
    PUBLIC,
    SECRETS,
    SERVER,
    StreamDriver,
    auth,
    build_snapshot,
    make_relay,
)

pytestmark = pytest.mark.anyio

FLAGS = ("banner-text", "dark-mode", "max-items", "new-checkout", "internal-ops", "missing")

CONTEXTS = [
    {"targetingKey": "member-zq7"},
    {"targetingKey": "excluded-member-w2", "attr-plan-q3": "vip"},
    {"targetingKey": "target-user-j1"},
    {"targetingKey": "u", "attr-plan-q3": "acme-corp-e5x", "email": "x@corp-domain-h6.example"},
    {"targetingKey": "u", "country": "CA"},
    {"targetingKey": "u"},
    {"country": "CA"},
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_no_response_contains_rules() -> None:
    relay = make_relay(rate_limit_per_s=1000, rate_limit_burst=1000)
    bodies = relay.bodies
    async with relay.client() as client:
        for context in CONTEXTS:
            body = {"context": context}
            for token in (PUBLIC, LISTED, SERVER, "pk_live_nope"):
                headers = auth(token, Origin=LISTED_ORIGIN)
                await client.post("/sdk/v1/flags", json=body, headers=headers)
                bulk = await client.post("/ofrep/v1/evaluate/flags", json=body, headers=headers)
                if bulk.status_code == 200:
                    await client.post(
                        "/ofrep/v1/evaluate/flags",
                        json=body,
                        headers={**headers, "If-None-Match": bulk.headers["etag"]},
                    )
                for key in FLAGS:
                    await client.post(f"/ofrep/v1/evaluate/flags/{key}", json=body, headers=headers)
        for raw in (b"{", b"{}", b'{"context": 1}'):
            await client.post("/sdk/v1/flags", content=raw, headers=auth())
            await client.post("/ofrep/v1/evaluate/flags", content=raw, headers=auth())
            await client.post("/ofrep/v1/evaluate/flags/dark-mode", content=raw, headers=auth())
        for path in ("/healthz", "/readyz", "/metrics", "/nope"):
            await client.get(path)
        await client.options("/sdk/v1/flags", headers={"Origin": LISTED_ORIGIN})
        bulk = await client.post(
            "/ofrep/v1/evaluate/flags", json={"context": {"targetingKey": "u"}}, headers=auth()
        )

    url = urlsplit(bulk.json()["eventStreams"][0]["url"])
    stream = StreamDriver(relay.app, url.path, url.query)
    await stream.start()
    bodies.append(await stream.read())
    relay.swap(build_snapshot(2, dark_mode_enabled=False))
    bodies.append(await stream.read())
    await stream.disconnect()

    assert len(bodies) > 200
    # The strings looked for are really in the snapshot the relay serves from.
    snapshot = msgspec.json.encode(build_snapshot())
    assert all(s.encode() in snapshot for s in SECRETS if s.islower() and "-" in s)
    for sent in bodies:
        for secret in SECRETS:
            assert secret.encode() not in sent, (secret, sent[:300])


async def test_server_side_flags_are_invisible() -> None:
    relay = make_relay()
    async with relay.client() as client:
        for context in CONTEXTS:
            body = {"context": context}
            sdk = await client.post("/sdk/v1/flags", json=body, headers=auth())
            bulk = await client.post("/ofrep/v1/evaluate/flags", json=body, headers=auth())
            for response in (sdk, bulk):
                assert b"internal-ops" not in response.content
                assert b"server-only-secret-value" not in response.content
            single = await client.post(
                "/ofrep/v1/evaluate/flags/internal-ops", json=body, headers=auth()
            )
            assert single.status_code == 404
            assert single.json()["errorCode"] == "FLAG_NOT_FOUND"
