"""``GET /sdk/v1/vane.js`` and ``GET /sdk/v1/selectors`` over HTTP (httpx over the relay's app)."""

from __future__ import annotations

import gzip

import httpx
import msgspec
import pytest

from relay.routes.tracker import script_source
from shared.wire.snapshot import ExperimentSnapshot, ExperimentVariant
from tests.relay.helpers import PUBLIC, SERVER, Relay, build_snapshot, make_relay
from tests.variants import variant_of

pytestmark = pytest.mark.anyio

ORIGIN = "https://shop.example"
SIZE_LIMIT = 6 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _experiment(key: str, kind: str, url: str, selector: str | None) -> ExperimentSnapshot:
    variants = (
        ExperimentVariant(key="control", weight=None, content=""),
        ExperimentVariant(key="treatment", weight=None, content="New"),
    )
    return ExperimentSnapshot(
        key=key, type=kind, url=url, goal="cta_click", variants=variants, selector=selector
    )


def _with_experiments(relay: Relay) -> None:
    experiments = {
        "hero": _experiment("hero", "element", "/pricing*", "#hero h1"),
        "buy": _experiment("buy", "cta", "*", ".buy"),
        "other-page": _experiment("other-page", "element", "/about", "#about"),
        "manual": _experiment("manual", "manual", "*", None),
    }
    relay.swap(msgspec.structs.replace(build_snapshot(2), experiments=experiments))


async def test_the_script_is_served_with_cache_headers_and_gzip() -> None:
    relay = make_relay()
    async with relay.client() as client:
        plain = await client.get("/sdk/v1/vane.js", headers={"Accept-Encoding": "identity"})
        zipped = await client.get("/sdk/v1/vane.js", headers={"Accept-Encoding": "gzip, br"})
        again = await client.get(
            "/sdk/v1/vane.js",
            headers={"Accept-Encoding": "gzip", "If-None-Match": zipped.headers["etag"]},
        )
    assert plain.status_code == 200
    assert plain.headers["content-type"].startswith("text/javascript")
    assert "max-age" in plain.headers["cache-control"]
    assert plain.headers["vary"] == "Accept-Encoding"
    assert "content-encoding" not in plain.headers
    assert plain.content == script_source()
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == script_source()  # httpx decodes it
    assert zipped.headers["etag"] != plain.headers["etag"]
    assert again.status_code == 304
    assert again.content == b""


async def test_the_script_is_small_and_has_no_eval() -> None:
    relay = make_relay()
    transport = httpx.ASGITransport(app=relay.app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client,
        client.stream("GET", "/sdk/v1/vane.js", headers={"Accept-Encoding": "gzip"}) as answer,
    ):
        served = b"".join([chunk async for chunk in answer.aiter_raw()])  # the bytes as sent
    source = script_source()
    assert gzip.decompress(served) == source
    print(f"vane.js: {len(source)} bytes, {len(served)} bytes gzipped as served")
    assert len(served) <= SIZE_LIMIT
    text = source.decode()
    assert "eval(" not in text
    assert "new Function" not in text
    assert "innerHTML" not in text  # content is text, never markup


async def test_selectors_of_the_experiments_running_on_a_page() -> None:
    relay = make_relay()
    _with_experiments(relay)
    query = f"/sdk/v1/selectors?key={PUBLIC}&url="
    async with relay.client() as client:
        pricing = await client.get(
            query + "https://shop.example/pricing/team", headers={"Origin": ORIGIN}
        )
        about = await client.get(query + "/about")
        home = await client.get(query + "/")
        cached = await client.get(query + "/", headers={"If-None-Match": home.headers["etag"]})
    assert pricing.json() == {"selectors": ["#hero h1", ".buy"]}
    assert pricing.headers["access-control-allow-origin"] == ORIGIN
    assert "max-age" in pricing.headers["cache-control"]
    assert about.json() == {"selectors": ["#about", ".buy"]}
    assert home.json() == {"selectors": [".buy"]}
    assert cached.status_code == 304


async def test_with_a_unit_the_answer_carries_the_units_variants() -> None:
    relay = make_relay()
    _with_experiments(relay)
    query = f"/sdk/v1/selectors?key={PUBLIC}&url=/pricing/team&unit="
    units = [f"visitor-{i}" for i in range(40)]
    async with relay.client() as client:
        responses = [await client.get(query + unit) for unit in units]
        answers = [r.json() for r in responses]
        empty = await client.get(query + "%20")
        long = await client.get(query + "u" * 201)
    for unit, answer in zip(units, answers, strict=True):
        assert answer["selectors"] == ["#hero h1", ".buy"]
        assert [(x["key"], x["type"], x["selector"], x["goal"]) for x in answer["experiments"]] == [
            ("hero", "element", "#hero h1", "cta_click"),
            ("buy", "cta", ".buy", "cta_click"),
        ]
        for x in answer["experiments"]:
            variant = variant_of(x["key"], unit, ["control", "treatment"], [None, None])
            assert (x["variant"], x["content"]) == (
                variant,
                "New" if variant == "treatment" else "",
            )
    assert {x["variant"] for a in answers for x in a["experiments"]} == {"control", "treatment"}
    assert {r.headers["cache-control"] for r in responses} == {"private, max-age=30"}
    assert empty.status_code == long.status_code == 422
    assert long.json()["error"]["details"] == [{"field": "unit", "message": "1 to 200 characters"}]


async def test_selectors_need_a_public_key() -> None:
    relay = make_relay()
    async with relay.client() as client:
        none = await client.get("/sdk/v1/selectors?url=/")
        unknown = await client.get("/sdk/v1/selectors?key=pk_nope&url=/")
        server = await client.get(f"/sdk/v1/selectors?key={SERVER}&url=/")
        long = await client.get(f"/sdk/v1/selectors?key={PUBLIC}&url=/{'a' * 3000}")
    assert none.status_code == 401
    assert unknown.status_code == 401
    assert server.status_code == 403
    assert long.status_code == 422
    assert long.json()["error"]["details"] == [
        {"field": "url", "message": "at most 2048 characters"}
    ]


async def test_the_type_declarations_are_served() -> None:
    relay = make_relay()
    async with relay.client() as client:
        types = await client.get("/sdk/v1/vane.d.ts")
    assert types.status_code == 200
    assert types.headers["content-type"].startswith("application/typescript")
    assert types.content == script_source("vane.d.ts")
    assert "interface Vane" in types.text


async def test_a_public_key_may_come_in_the_query_and_no_other() -> None:
    """``?key=pk_…`` with a text/plain body: a CORS simple request, no preflight."""
    relay = make_relay()
    body = b'{"context": {"targetingKey": "user-1"}}'
    plain = {"Content-Type": "text/plain;charset=UTF-8", "Origin": ORIGIN}
    async with relay.client() as client:
        public = await client.post(f"/sdk/v1/flags?key={PUBLIC}", content=body, headers=plain)
        server = await client.post(f"/sdk/v1/flags?key={SERVER}", content=body)
    assert public.status_code == 200
    assert public.headers["access-control-allow-origin"] == ORIGIN
    assert "flags" in public.json()
    assert server.status_code == 403
    assert "?key=" in server.json()["error"]["message"]
