"""The relay's browser and ops endpoints over HTTP semantics (httpx over the ASGI app)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import httpx
import msgspec
import pytest

from relay.prometheus import RelayMetrics
from relay.routes.compose import build_http_app
from relay.store import EnvironmentState, Store
from shared.engine import Reason, compile_snapshot, evaluate, evaluate_all, openfeature_reason
from shared.keys import hash_token
from shared.wire.protocol import AccessKey
from shared.wire.snapshot import FlagSnapshot, Prerequisite, Serve, Snapshot, Variation
from tests.relay.helpers import (
    ENV,
    LISTED,
    LISTED_ORIGIN,
    PUBLIC,
    SERVER,
    Relay,
    auth,
    build_snapshot,
    make_relay,
    public_access,
    settings,
)

pytestmark = pytest.mark.anyio

BULK = "/ofrep/v1/evaluate/flags"
SDK = "/sdk/v1/flags"
ORIGIN = "https://app.example.com"

CONTEXTS: list[dict[str, Any]] = [
    {"targetingKey": "user-1", "country": "CA"},
    {"targetingKey": "user-2", "country": "CA"},
    {"targetingKey": "target-user-j1"},
    {"targetingKey": "member-zq7"},
    {"targetingKey": "excluded-member-w2", "attr-plan-q3": "vip"},
    {"targetingKey": "someone", "attr-plan-q3": "vip"},
    {"key": "user-3", "attr-plan-q3": "acme-corp-e5-team", "email": "a@corp-domain-h6.example"},
    {"targetingKey": "user-4", "country": ["US", "CA"]},
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def relay() -> Relay:
    return make_relay()


def cors_ok(response: httpx.Response, origin: str = ORIGIN) -> None:
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["vary"] == "Origin"
    assert response.headers["access-control-expose-headers"] == "ETag, Retry-After"


def vane_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert isinstance(error["details"], list)
    return dict(error)


def state_of(relay: Relay) -> EnvironmentState:
    state = relay.store.get(ENV)
    assert state is not None
    return state


# -------------------------------------------------------------------------------- /sdk/v1


async def test_sdk_flags_match_the_engine(relay: Relay) -> None:
    state = state_of(relay)
    async with relay.client() as client:
        for context in CONTEXTS:
            response = await client.post(SDK, json={"context": context}, headers=auth())
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            flags = response.json()["flags"]
            expected = evaluate_all(state.compiled, context, 0, client_side_only=True)
            assert (
                set(flags)
                == set(expected)
                == {
                    "banner-text",
                    "dark-mode",
                    "max-items",
                    "new-checkout",
                }
            )
            for key, evaluation in expected.items():
                entry = flags[key]
                assert entry["value"] == evaluation.value
                assert entry["variation"] == evaluation.variation
                assert entry["reason"] == evaluation.reason.value
                allowed = {"value", "variation", "reason", "variationName"}
                assert set(entry) <= allowed
                if evaluation.variation_name:
                    assert entry["variationName"] == evaluation.variation_name


async def test_sdk_reasons(relay: Relay) -> None:
    async with relay.client() as client:
        response = await client.post(SDK, json={"context": {"key": "member-zq7"}}, headers=auth())
        flags = response.json()["flags"]
    assert flags["dark-mode"] == {
        "value": True,
        "variation": 0,
        "reason": "RULE_MATCH",
        "variationName": "on",
    }
    assert flags["new-checkout"]["reason"] == "OFF"
    assert flags["banner-text"]["reason"] == "FALLTHROUGH"


async def test_sdk_context_without_key_answers_errors_per_flag(relay: Relay) -> None:
    async with relay.client() as client:
        for context in ({}, {"targetingKey": ""}, {"country": "CA"}, {"targetingKey": 5}):
            response = await client.post(SDK, json={"context": context}, headers=auth())
            assert response.status_code == 200
            flags = response.json()["flags"]
            assert len(flags) == 4
            for entry in flags.values():
                assert entry == {
                    "value": None,
                    "variation": None,
                    "reason": "ERROR",
                    "errorCode": "TARGETING_KEY_MISSING",
                }


async def test_sdk_accepts_x_api_key(relay: Relay) -> None:
    async with relay.client() as client:
        response = await client.post(
            SDK, json={"context": {"key": "u"}}, headers={"X-API-Key": PUBLIC}
        )
    assert response.status_code == 200


async def test_sdk_errors(relay: Relay) -> None:
    body = {"context": {"key": "u"}}
    async with relay.client() as client:
        response = await client.post(SDK, json=body)
        vane_error(response, 401, "unauthorized")
        response = await client.post(SDK, json=body, headers=auth("pk_live_unknown"))
        vane_error(response, 401, "unauthorized")
        response = await client.post(SDK, json=body, headers={"Authorization": f"Basic {PUBLIC}"})
        vane_error(response, 401, "unauthorized")
        response = await client.post(SDK, json=body, headers=auth(SERVER))
        vane_error(response, 403, "forbidden")
        response = await client.post(SDK, content=b"{not json", headers=auth())
        vane_error(response, 400, "malformed_json")
        response = await client.post(SDK, content=b"", headers=auth())
        vane_error(response, 400, "malformed_json")
        for bad in ({"context": [1]}, {"context": "x"}, {"context": None}, {}, [1]):
            response = await client.post(SDK, json=bad, headers=auth())
            error = vane_error(response, 422, "validation_error")
            assert error["details"][0]["field"] == "context"
        big = b'{"context": {"key": "' + b"x" * (1 << 20) + b'"}}'
        response = await client.post(SDK, content=big, headers=auth())
        vane_error(response, 413, "payload_too_large")
        response = await client.get(SDK, headers=auth())
        vane_error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == "OPTIONS, POST"


async def test_without_snapshot_is_503() -> None:
    """A key that resolves to an environment the relay holds no state for (yet)."""

    class Unloaded(Store):
        def get(self, environment: str) -> EnvironmentState | None:
            return None

    store = Unloaded()
    store.swap(EnvironmentState.build(build_snapshot(), public_access()))
    app = build_http_app(store, settings(), RelayMetrics(store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
        sdk = await client.post(SDK, json={"context": {"key": "u"}}, headers=auth(Origin=ORIGIN))
        bulk = await client.post(BULK, json={"context": {"key": "u"}}, headers=auth())
    vane_error(sdk, 503, "unavailable")
    cors_ok(sdk)
    assert bulk.status_code == 503
    assert bulk.json() == {"errorCode": "GENERAL", "errorDetails": "relay has no snapshot yet"}


# ------------------------------------------------------------------------------- OFREP one


async def test_ofrep_single_matches_the_engine(relay: Relay) -> None:
    state = state_of(relay)
    async with relay.client() as client:
        for context in CONTEXTS:
            for key in ("banner-text", "dark-mode", "max-items", "new-checkout"):
                response = await client.post(
                    f"{BULK}/{key}", json={"context": context}, headers=auth()
                )
                assert response.status_code == 200, response.text
                evaluation = evaluate(state.compiled, key, context, 0)
                body = response.json()
                assert body == {
                    "key": key,
                    "value": evaluation.value,
                    "reason": openfeature_reason(evaluation),
                    "variant": evaluation.variation_name or str(evaluation.variation),
                    "metadata": {"version": 1},
                }


async def test_ofrep_single_reasons(relay: Relay) -> None:
    async with relay.client() as client:

        async def one(key: str, context: dict[str, Any]) -> dict[str, Any]:
            response = await client.post(f"{BULK}/{key}", json={"context": context}, headers=auth())
            return dict(response.json())

        assert (await one("dark-mode", {"targetingKey": "target-user-j1"}))["reason"] == (
            "TARGETING_MATCH"
        )
        assert (await one("new-checkout", {"targetingKey": "u"}))["reason"] == "DISABLED"
        assert (await one("dark-mode", {"targetingKey": "u"}))["reason"] == "DEFAULT"
        split = await one("banner-text", {"targetingKey": "u", "country": "CA"})
        assert split["reason"] == "SPLIT"
        assert split["variant"] in {"hello", "2"}


async def test_ofrep_names_the_prerequisite_that_turned_a_flag_off(relay: Relay) -> None:
    """Issue #35: an enabled flag whose prerequisite is off answered ``DISABLED`` and nothing
    more. OFREP's reasons have no prerequisite one, so the reason stays the closest
    (``DISABLED``: it serves its off variation) and the metadata names the prerequisite, in
    the single and the bulk answer alike; a flag off by itself names none."""
    snapshot = build_snapshot()
    flags = dict(snapshot.flags)
    flags["banner-text"] = msgspec.structs.replace(
        flags["banner-text"], prerequisites=(Prerequisite(key="new-checkout", variation=0),)
    )
    relay.store.swap(
        EnvironmentState.build(msgspec.structs.replace(snapshot, flags=flags), public_access())
    )
    context = {"context": {"targetingKey": "u", "country": "CA"}}
    async with relay.client() as client:
        single = (await client.post(f"{BULK}/banner-text", json=context, headers=auth())).json()
        bulk = (await client.post(BULK, json=context, headers=auth())).json()["flags"]
        off = (await client.post(f"{BULK}/new-checkout", json=context, headers=auth())).json()
    [item] = [f for f in bulk if f["key"] == "banner-text"]
    for answer in (single, item):
        assert answer["reason"] == "DISABLED"
        assert answer["metadata"]["prerequisiteFailed"] == "new-checkout"
    assert off["reason"] == "DISABLED"
    assert "prerequisiteFailed" not in off["metadata"]


async def test_ofrep_single_errors(relay: Relay) -> None:
    good = {"context": {"targetingKey": "u"}}
    async with relay.client() as client:
        for key in ("nope", "internal-ops"):
            response = await client.post(f"{BULK}/{key}", json=good, headers=auth())
            assert response.status_code == 404
            body = response.json()
            assert body["key"] == key
            assert body["errorCode"] == "FLAG_NOT_FOUND"
            assert isinstance(body["errorDetails"], str)
        cases = [
            (b"{oops", "PARSE_ERROR"),
            (b'{"context": 3}', "INVALID_CONTEXT"),
            (b"{}", "INVALID_CONTEXT"),
            (b'{"context": {"targetingKey": 12}}', "INVALID_CONTEXT"),
            (b'{"context": {"country": "CA"}}', "TARGETING_KEY_MISSING"),
            (b'{"context": {"targetingKey": ""}}', "TARGETING_KEY_MISSING"),
        ]
        for raw, code in cases:
            response = await client.post(f"{BULK}/dark-mode", content=raw, headers=auth())
            assert response.status_code == 400, raw
            body = response.json()
            assert body["key"] == "dark-mode"
            assert body["errorCode"] == code
            assert body["errorDetails"]
        response = await client.post(f"{BULK}/dark-mode", json=good)
        assert response.status_code == 401
        response = await client.post(f"{BULK}/dark-mode", json=good, headers=auth(SERVER))
        assert response.status_code == 403
        assert response.json()["errorCode"] == "GENERAL"
        response = await client.get(f"{BULK}/dark-mode", headers=auth())
        assert response.status_code == 405


async def test_ofrep_single_archived_flag_is_not_found(relay: Relay) -> None:
    snapshot = build_snapshot(2)
    flags = {k: f for k, f in snapshot.flags.items() if k != "dark-mode"}
    relay.swap(
        Snapshot(
            project="proj", environment=ENV, version=2, flags=flags, segments=snapshot.segments
        )
    )
    async with relay.client() as client:
        response = await client.post(
            f"{BULK}/dark-mode", json={"context": {"targetingKey": "u"}}, headers=auth()
        )
        assert response.status_code == 404
        bulk = await client.post(BULK, json={"context": {"targetingKey": "u"}}, headers=auth())
    assert "dark-mode" not in {item["key"] for item in bulk.json()["flags"]}


def _with_runs(state: EnvironmentState, **runs: Any) -> EnvironmentState:
    compiled = dataclasses.replace(state.compiled, runs={**state.compiled.runs, **runs})
    return dataclasses.replace(state, compiled=compiled)


async def test_ofrep_single_engine_failure_is_500_general(relay: Relay) -> None:
    def broken(context: Any, key: str) -> Any:
        raise RuntimeError("boom")

    relay.store.swap(_with_runs(state_of(relay), **{"dark-mode": broken}))
    async with relay.client() as client:
        response = await client.post(
            f"{BULK}/dark-mode",
            json={"context": {"targetingKey": "u"}},
            headers=auth(Origin=ORIGIN),
        )
    assert response.status_code == 500
    assert response.json()["errorCode"] == "GENERAL"
    cors_ok(response)


async def test_malformed_flag_is_parse_error() -> None:
    relay = make_relay()
    bad = FlagSnapshot(
        key="broken",
        version=1,
        type="boolean",
        variations=(Variation(0, True),),
        enabled=True,
        off_variation=0,
        fallthrough=Serve(variation=5),
    )
    snapshot = build_snapshot(2)
    snapshot = Snapshot(
        project="proj",
        environment=ENV,
        version=2,
        flags={**snapshot.flags, "broken": bad},
        segments=snapshot.segments,
    )
    compiled = compile_snapshot(snapshot, strict=False)
    state = EnvironmentState.build(build_snapshot(2), public_access())
    relay.store.swap(dataclasses.replace(state, snapshot=snapshot, compiled=compiled))
    async with relay.client() as client:
        context = {"context": {"targetingKey": "u"}}
        single = await client.post(f"{BULK}/broken", json=context, headers=auth())
        bulk = await client.post(BULK, json=context, headers=auth())
        sdk = await client.post(SDK, json=context, headers=auth())
    assert single.status_code == 400
    assert single.json()["errorCode"] == "PARSE_ERROR"
    item = next(i for i in bulk.json()["flags"] if i["key"] == "broken")
    assert item["errorCode"] == "PARSE_ERROR"
    assert "value" not in item
    assert sdk.json()["flags"]["broken"]["errorCode"] == "PARSE_ERROR"


async def test_unhandled_error_is_500_in_the_routes_shape(relay: Relay) -> None:
    class Broken(Store):
        def get(self, environment: str) -> EnvironmentState | None:
            raise RuntimeError("boom")

    broken = Broken()
    broken.swap(state_of(relay))
    app = build_http_app(broken, relay.settings, RelayMetrics(broken))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
        context = {"context": {"targetingKey": "u"}}
        ofrep = await client.post(BULK, json=context, headers=auth(Origin=ORIGIN))
        sdk = await client.post(SDK, json=context, headers=auth())
    assert ofrep.status_code == 500
    assert ofrep.json()["errorCode"] == "GENERAL"
    cors_ok(ofrep)
    vane_error(sdk, 500, "internal_error")


# ------------------------------------------------------------------------------ OFREP bulk


async def test_ofrep_bulk_matches_the_engine(relay: Relay) -> None:
    state = state_of(relay)
    async with relay.client() as client:
        for context in CONTEXTS:
            response = await client.post(BULK, json={"context": context}, headers=auth())
            assert response.status_code == 200
            body = response.json()
            assert set(body) == {"flags", "metadata", "eventStreams"}
            assert body["metadata"] == {"version": 1}
            expected = evaluate_all(state.compiled, context, 0, client_side_only=True)
            items = {item["key"]: item for item in body["flags"]}
            assert set(items) == set(expected)
            for key, evaluation in expected.items():
                assert items[key] == {
                    "key": key,
                    "value": evaluation.value,
                    "reason": openfeature_reason(evaluation),
                    "variant": evaluation.variation_name or str(evaluation.variation),
                    "metadata": {"version": 1},
                }
                assert evaluation.reason is not Reason.ERROR


async def test_ofrep_bulk_event_stream_entry(relay: Relay) -> None:
    context = {"context": {"targetingKey": "u"}}
    async with relay.client() as client:
        plain = await client.post(BULK, json=context, headers=auth())
        forwarded = await client.post(
            BULK,
            json=context,
            headers=auth(**{"X-Forwarded-Proto": "https", "Host": "flags.example.com:8443"}),
        )
    [stream] = plain.json()["eventStreams"]
    assert stream["type"] == "sse"
    assert stream["inactivityDelaySec"] == 120
    assert stream["url"].startswith("http://relay.test/ofrep/v1/events?token=")
    assert stream["url"].endswith("&v=1")
    [stream] = forwarded.json()["eventStreams"]
    assert stream["url"].startswith("https://flags.example.com:8443/ofrep/v1/events?token=")


async def test_ofrep_bulk_etag_and_304(relay: Relay) -> None:
    context = {"context": {"targetingKey": "u", "country": "CA"}}
    other = {"context": {"targetingKey": "v", "country": "CA"}}
    async with relay.client() as client:
        first = await client.post(BULK, json=context, headers=auth(Origin=ORIGIN))
        etag = first.headers["etag"]
        assert etag.startswith('"')
        assert etag.endswith('"')
        again = await client.post(BULK, json=context, headers=auth())
        assert again.headers["etag"] == etag
        different = await client.post(BULK, json=other, headers=auth())
        assert different.headers["etag"] != etag

        cached = await client.post(
            BULK, json=context, headers=auth(Origin=ORIGIN, **{"If-None-Match": etag})
        )
        assert cached.status_code == 304
        assert cached.content == b""
        assert cached.headers["etag"] == etag
        cors_ok(cached)
        listed = await client.post(
            BULK, json=context, headers=auth(**{"If-None-Match": f'"zzz", W/{etag}'})
        )
        assert listed.status_code == 304
        stale = await client.post(BULK, json=context, headers=auth(**{"If-None-Match": '"zzz"'}))
        assert stale.status_code == 200

        relay.swap(build_snapshot(2, dark_mode_enabled=False))
        changed = await client.post(BULK, json=context, headers=auth(**{"If-None-Match": etag}))
        assert changed.status_code == 200
        assert changed.headers["etag"] != etag
        assert changed.json()["metadata"] == {"version": 2}
        dark = next(i for i in changed.json()["flags"] if i["key"] == "dark-mode")
        assert dark["reason"] == "DISABLED"


async def test_ofrep_bulk_failures(relay: Relay) -> None:
    cases = [
        (b"[", "PARSE_ERROR"),
        (b"{}", "INVALID_CONTEXT"),
        (b'{"context": []}', "INVALID_CONTEXT"),
        (b'{"context": {"targetingKey": false}}', "INVALID_CONTEXT"),
        (b'{"context": {"email": "a@b"}}', "TARGETING_KEY_MISSING"),
    ]
    async with relay.client() as client:
        for raw, code in cases:
            response = await client.post(BULK, content=raw, headers=auth(Origin=ORIGIN))
            assert response.status_code == 400
            body = response.json()
            assert set(body) == {"errorCode", "errorDetails"}
            assert body["errorCode"] == code
            cors_ok(response)
        response = await client.post(BULK, json={"context": {"key": "u"}})
        assert response.status_code == 401
        response = await client.post(BULK, json={"context": {"key": "u"}}, headers=auth(SERVER))
        assert response.status_code == 403


# ------------------------------------------------------------------------------------ CORS


@pytest.mark.parametrize("path", [SDK, BULK, f"{BULK}/dark-mode", "/ofrep/v1/events"])
async def test_preflight_needs_no_key(relay: Relay, path: str) -> None:
    async with relay.client() as client:
        response = await client.options(
            path,
            headers={
                "Origin": ORIGIN,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, if-none-match",
            },
        )
    assert response.status_code == 204
    assert response.content == b""
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["access-control-allow-methods"] == "GET, POST, OPTIONS"
    assert (
        response.headers["access-control-allow-headers"]
        == "Authorization, Content-Type, If-None-Match, X-API-Key"
    )
    assert int(response.headers["access-control-max-age"]) > 0
    assert "Origin" in response.headers["vary"]


async def test_cors_headers_on_every_browser_answer(relay: Relay) -> None:
    context = {"context": {"targetingKey": "u"}}
    headers = auth(Origin=ORIGIN)
    async with relay.client() as client:
        ok = await client.post(BULK, json=context, headers=headers)
        cors_ok(ok)
        not_modified = await client.post(
            BULK, json=context, headers={**headers, "If-None-Match": ok.headers["etag"]}
        )
        assert not_modified.status_code == 304
        cors_ok(not_modified)
        for response in (
            await client.post(SDK, json=context, headers=headers),
            await client.post(BULK, json=context, headers={"Origin": ORIGIN}),
            await client.post(SDK, json=context, headers={"Origin": ORIGIN}),
            await client.post(SDK, json=context, headers=auth("pk_live_nope", Origin=ORIGIN)),
            await client.post(SDK, json=context, headers=auth(SERVER, Origin=ORIGIN)),
            await client.post(f"{BULK}/nope", json=context, headers=headers),
            await client.post(SDK, content=b"{", headers=headers),
        ):
            cors_ok(response)
        no_origin = await client.post(BULK, json=context, headers=auth())
        assert "access-control-allow-origin" not in no_origin.headers
        assert no_origin.headers["access-control-expose-headers"] == "ETag, Retry-After"


async def test_origin_allow_list(relay: Relay) -> None:
    context = {"context": {"targetingKey": "u"}}
    async with relay.client() as client:
        allowed = await client.post(BULK, json=context, headers=auth(LISTED, Origin=LISTED_ORIGIN))
        assert allowed.status_code == 200
        cors_ok(allowed, LISTED_ORIGIN)
        refused = await client.post(BULK, json=context, headers=auth(LISTED, Origin=ORIGIN))
        assert refused.status_code == 403
        assert "access-control-allow-origin" not in refused.headers
        assert refused.json()["errorCode"] == "GENERAL"
        refused_sdk = await client.post(SDK, json=context, headers=auth(LISTED, Origin=ORIGIN))
        vane_error(refused_sdk, 403, "forbidden")
        assert "access-control-allow-origin" not in refused_sdk.headers
        # Not a browser (no Origin): the allow-list does not apply.
        server_side = await client.post(BULK, json=context, headers=auth(LISTED))
        assert server_side.status_code == 200
        # Any origin for a key without a list.
        anywhere = await client.post(BULK, json=context, headers=auth(Origin="https://x.example"))
        cors_ok(anywhere, "https://x.example")


async def test_wildcard_allow_list() -> None:
    token = "pk_live_wild_0123456789"
    relay = make_relay()
    access = public_access(
        AccessKey(id="wild", kind="public", hash=hash_token(token), origins=("*",))
    )
    relay.swap(build_snapshot(2), access)
    async with relay.client() as client:
        response = await client.post(
            SDK, json={"context": {"key": "u"}}, headers=auth(token, Origin="https://any.example")
        )
    assert response.status_code == 200
    cors_ok(response, "https://any.example")


# ------------------------------------------------------------------------------ rate limit


async def test_rate_limit() -> None:
    relay = make_relay(rate_limit_per_s=0.5, rate_limit_burst=2)
    context = {"context": {"targetingKey": "u"}}
    async with relay.client() as client:
        statuses = []
        for _ in range(3):
            response = await client.post(BULK, json=context, headers=auth(Origin=ORIGIN))
            statuses.append(response.status_code)
        assert statuses == [200, 200, 429]
        assert response.headers["retry-after"] == "2"
        cors_ok(response)
        sdk = await client.post(SDK, json=context, headers=auth())
        vane_error(sdk, 429, "rate_limited")
        assert int(sdk.headers["retry-after"]) >= 1
        # Buckets are per key.
        other = await client.post(BULK, json=context, headers=auth(LISTED))
        assert other.status_code == 200


async def test_rate_limit_off_by_default(relay: Relay) -> None:
    async with relay.client() as client:
        for _ in range(50):
            response = await client.post(SDK, json={"context": {"key": "u"}}, headers=auth())
            assert response.status_code == 200


# ------------------------------------------------------------------------------------- ops


async def test_healthz(relay: Relay) -> None:
    async with relay.client() as client:
        response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_keys_before_the_first_snapshot_get_503_not_401() -> None:
    relay = make_relay(loaded=False)
    async with relay.client() as client:
        flags = await client.post(SDK, json={"context": {"key": "u"}}, headers=auth())
        bulk = await client.post(BULK, json={"context": {"targetingKey": "u"}}, headers=auth())
        vane_error(flags, 503, "unavailable")
        assert bulk.status_code == 503
        for response in (flags, bulk):
            assert response.headers["retry-after"] == "1"
        relay.swap(build_snapshot(1))
        unknown = await client.post(SDK, json={"context": {"key": "u"}}, headers=auth("pk_x"))
        vane_error(unknown, 401, "unauthorized")


async def test_readyz_before_and_after_a_snapshot() -> None:
    relay = make_relay(loaded=False)
    async with relay.client() as client:
        before = await client.get("/readyz")
        assert before.status_code == 503
        assert before.json() == {
            "ready": False,
            "stale": True,
            "connected": False,
            "upstream": "",
            "environments": {},
            "streams": {"open": 0, "max": 10_000, "refused": 0},
        }
        relay.swap(build_snapshot(4))
        relay.store.connected = True
        relay.store.upstream_alive()
        after = await client.get("/readyz")
        assert after.status_code == 200
        body = after.json()
        assert body["ready"] is True
        assert body["stale"] is False
        assert body["connected"] is True
        assert body["environments"][ENV]["version"] == 4
        assert body["environments"][ENV]["versionsBehind"] == 0
        assert 0 <= body["environments"][ENV]["ageSeconds"] < 5

        relay.store.expected = frozenset({ENV, "staging"})
        waiting = await client.get("/readyz")
        assert waiting.status_code == 503
        relay.store.expected = frozenset({ENV})

        relay.store.last_upstream_message -= 3600  # silent for an hour: serving, but stale
        silent = await client.get("/readyz")
        assert silent.status_code == 200
        assert silent.json()["stale"] is True
        relay.store.connected = False
        cut_off = await client.get("/readyz")
        assert cut_off.json()["connected"] is False
        assert cut_off.json()["stale"] is True


async def test_metrics(relay: Relay) -> None:
    relay.metrics.register_gauge_callback("spool_depth", "Events waiting upstream.", lambda: 7)
    relay.metrics.register_gauge_callback(
        "spool_bytes", "Spool size per file.", lambda: {("a",): 1.5}, labels=("file",)
    )
    async with relay.client() as client:
        await client.post(BULK, json={"context": {"targetingKey": "u"}}, headers=auth())
        await client.post(
            f"{BULK}/dark-mode", json={"context": {"targetingKey": "u"}}, headers=auth()
        )
        await client.post(SDK, json={"context": {"key": "u"}})
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'vane_relay_evaluations_total{environment="production"} 5.0' in text
    assert 'vane_relay_snapshot_version{environment="production"} 1.0' in text
    assert 'vane_relay_snapshot_age_seconds{environment="production"}' in text
    assert "vane_relay_upstream_connected 1.0" in text
    assert (
        'vane_relay_http_requests_total{route="/ofrep/v1/evaluate/flags",status="200"} 1.0' in text
    )
    assert 'vane_relay_http_requests_total{route="/sdk/v1/flags",status="401"} 1.0' in text
    assert "vane_relay_sse_streams 0.0" in text
    assert "vane_relay_spool_depth 7.0" in text
    assert 'vane_relay_spool_bytes{file="a"} 1.5' in text


# --------------------------------------------------------------------------------- routing


async def test_unknown_path_and_wrong_method(relay: Relay) -> None:
    async with relay.client() as client:
        missing = await client.get("/nope")
        vane_error(missing, 404, "not_found")
        wrong = await client.post("/healthz")
        vane_error(wrong, 405, "method_not_allowed")
        assert wrong.headers["allow"] == "GET"
        nested = await client.post(f"{BULK}/a/b", json={}, headers=auth())
        vane_error(nested, 404, "not_found")
        ofrep_wrong = await client.put(BULK, headers=auth())
        assert ofrep_wrong.status_code == 405
        assert ofrep_wrong.json()["errorCode"] == "GENERAL"


async def test_other_scopes_are_ignored(relay: Relay) -> None:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        raise AssertionError("not called")

    async def send(message: Any) -> None:
        sent.append(message)

    await relay.app({"type": "lifespan"}, receive, send)
    await relay.app({"type": "websocket", "path": "/"}, receive, send)
    assert sent == []


async def test_body_cap_without_content_length(relay: Relay) -> None:
    chunk = b"x" * (256 * 1024)
    chunks = [b'{"context": {"key": "', *([chunk] * 5), b'"}}']
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        body = chunks.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(chunks)}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": SDK,
        "headers": [(b"authorization", f"Bearer {PUBLIC}".encode())],
        "query_string": b"",
    }
    await relay.app(scope, receive, send)
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["code"] == "payload_too_large"


def _sdk_scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    auth = (b"authorization", f"Bearer {PUBLIC}".encode())
    return {"type": "http", "method": "POST", "path": SDK, "headers": [auth, *headers]}


async def test_a_body_as_long_as_its_content_length_is_not_waited_on(relay: Relay) -> None:
    # granian hands a whole body over with more_body set, then an empty last message; the relay
    # answers from the first (a second receive is a hop between granian's thread and the loop).
    body = json.dumps({"context": {"targetingKey": "user-1"}}).encode()
    messages = [{"type": "http.request", "body": body, "more_body": True}]
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)  # a second call would fail: nothing is left

    async def send(message: Any) -> None:
        sent.append(message)

    scope = _sdk_scope([(b"content-length", str(len(body)).encode())])
    await relay.app(scope, receive, send)
    assert sent[0]["status"] == 200
    assert "flags" in json.loads(sent[1]["body"])


async def test_a_body_in_pieces_is_read_whole_with_or_without_content_length(
    relay: Relay,
) -> None:
    body = json.dumps({"context": {"targetingKey": "user-1"}}).encode()
    for headers in ([(b"content-length", str(len(body)).encode())], []):
        pieces = [body[:7], body[7:20], body[20:], b""]
        sent: list[Any] = []

        async def receive(pieces: list[bytes] = pieces) -> dict[str, Any]:
            return {"type": "http.request", "body": pieces.pop(0), "more_body": bool(pieces)}

        async def send(message: Any, sent: list[Any] = sent) -> None:
            sent.append(message)

        await relay.app(_sdk_scope(headers), receive, send)
        assert sent[0]["status"] == 200, sent
        assert "flags" in json.loads(sent[1]["body"])


async def test_extra_routes_share_the_gate() -> None:
    from relay.http import Request, Response, Router, vane_error_body
    from relay.routes.admission import Admission, Gate

    def register(router: Router, gate: Gate) -> None:
        async def echo(request: Request) -> Response:
            admitted = await gate.admit(request, vane_error_body)
            if not isinstance(admitted, Admission):
                return admitted
            return Response(200, admitted.body, admitted.headers)

        router.add("POST", "/sdk/v1/echo", echo, cors=True)

    store = Store()
    store.swap(EnvironmentState.build(build_snapshot(), public_access()))
    app = build_http_app(store, settings(), RelayMetrics(store), extra_routes=[register])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
        preflight = await client.options("/sdk/v1/echo", headers={"Origin": ORIGIN})
        assert preflight.status_code == 204
        ok = await client.post("/sdk/v1/echo", content=b"[1]", headers=auth(Origin=ORIGIN))
        assert ok.content == b"[1]"
        cors_ok(ok)
        refused = await client.post("/sdk/v1/echo", content=b"[1]", headers=auth(SERVER))
        vane_error(refused, 403, "forbidden")


async def test_ofrep_takes_kinds_as_launchdarklys_openfeature_providers_carry_them(
    relay: Relay,
) -> None:
    """Issue #23: ``kind`` in an evaluation context names its kind; ``"multi"`` holds a part per
    kind. A user target applies to the user part of a multi-kind context, not to an
    organization with the same key; a part without a key, or a kind that cannot be, is refused
    as OFREP refuses a context without a key."""
    member = {"kind": "multi", "user": {"key": "target-user-j1"}, "organization": {"key": "o"}}
    same_key = {"kind": "organization", "targetingKey": "target-user-j1"}
    async with relay.client() as client:
        hit = await client.post(f"{BULK}/dark-mode", json={"context": member}, headers=auth())
        assert (hit.status_code, hit.json()["reason"]) == (200, "TARGETING_MATCH"), hit.text
        other = await client.post(f"{BULK}/dark-mode", json={"context": same_key}, headers=auth())
        assert (other.status_code, other.json()["reason"]) == (200, "DEFAULT"), other.text
        cases = [
            ({"kind": "multi", "user": {"name": "no key"}}, "TARGETING_KEY_MISSING"),
            ({"kind": "multi"}, "INVALID_CONTEXT"),
            ({"kind": "multi", "user": "u1"}, "INVALID_CONTEXT"),
            ({"kind": "has space", "targetingKey": "u1"}, "INVALID_CONTEXT"),
        ]
        for context, code in cases:
            response = await client.post(
                f"{BULK}/dark-mode", json={"context": context}, headers=auth()
            )
            assert response.status_code == 400, context
            assert response.json()["errorCode"] == code, context
        bulk = await client.post(BULK, json={"context": member}, headers=auth())
        dark = next(f for f in bulk.json()["flags"] if f["key"] == "dark-mode")
        assert dark["reason"] == "TARGETING_MATCH"
