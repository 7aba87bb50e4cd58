"""The rule for stored input, generated across the whole management API on PostgreSQL.

Every operation of the control plane's ``/schema/openapi.json`` (schemathesis, valid requests of
each operation's shape, sent with the management key) gets one value planted in its request: a
NUL or a lone surrogate put into a string of its body (a value or an object key), its query or
its path; an integer beyond what a database column holds (2^31, 2^53, 2^63, 2^64, 10^30) put
where an integer was, or as the digits of a string. PostgreSQL refuses the first two in ``text``
and ``jsonb`` and overflows on the others, so any such value that reaches it unchecked is a 500;
the rule is that the edge answers (a 422 naming the field, a 404, ...) and never a 5xx.

Bounded and the same on every run: ``derandomize``, 30 examples per operation (about 30 s here
for all 75), one migrated database for the module, the app in-process (the requests still go
through the whole ASGI stack). Valid shapes only (schemathesis' positive mode), so that the
planted value is the request's one fault and meets the deeper code; invalid shapes on every
operation are ``tests/e2e/test_fuzz.py``'s. The request is sent by this module, not by
schemathesis: a lone surrogate cannot be held by schemathesis' case (it validates it as UTF-8)
nor put in a URL by an HTTP client, so it goes as the bytes UTF-8 would give it (``%ED%A0%80``),
as a client can send it, and in a JSON body as its ``\\ud800`` escape. The check is that of
schemathesis' ``not_a_server_error``: the status is below 500.

Checked by taking the checks away: without ``refuse_unstorable`` this test fails on six
operations, without the parameter middleware on 55 of the 75.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from litestar.testing import TestClient
from schemathesis import GenerationMode
from schemathesis.core import NotSet

from control_plane.app import create_app
from control_plane.entry.bootstrap import IssuedKey
from control_plane.settings import Settings
from tests.conftest import PostgresDatabases, fresh_postgres

if TYPE_CHECKING:  # schemathesis defines the alias for type checkers only
    from schemathesis.specs.openapi.schemas import OpenApiCase

pytestmark = pytest.mark.postgres

BAD_TEXT = st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80x"])
BIG_INTEGERS = st.sampled_from([2**31, 2**53, 2**63, -(2**63) - 1, 2**64, 10**30])
"""Each just beyond a column or a wire format: INTEGER, a double's exact integers, BIGINT, uint64."""

SEEDED = "fuzzed"
KNOWN = {"env": "production"}
"""Path parameters that name something the module's database holds (others: ``SEEDED``)."""
SENSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "key": st.integers(0, 999).map(lambda n: f"fuzz-{n}"),
    "name": st.sampled_from(["Fuzzed", "Fuzzed too"]),
    "flagKey": st.just(SEEDED),
    "environment": st.just("production"),
    "layer": st.just(SEEDED),
    "event": st.just("buy"),
    "goal": st.just("buy"),
    "url": st.just("https://shop.example/"),
    "metrics": st.just([SEEDED]),
    "share": st.sampled_from([0.01, 0.1]),
    "at": st.just("2099-01-01T00:00:00Z"),
}
"""Body fields that a random value rarely gets past (a key's pattern, a reference to something
that exists): given a sensible value at times, so the planted value meets the deeper code."""


@dataclass
class Management:
    client: TestClient[Any]
    key: str


@pytest.fixture(scope="module")
def management(postgres_databases: PostgresDatabases | None) -> Iterator[Management]:
    """One PostgreSQL database for the module, with a flag, a segment, a metric, an experiment,
    a layer and a holdout named ``fuzzed`` for the generated paths to find."""
    with fresh_postgres(postgres_databases) as url:
        app = create_app(Settings(database_url=url))
        with TestClient(app, raise_server_exceptions=False) as client:
            issued: list[IssuedKey] = app.state.issued_keys
            key = next(k.token for k in issued if k.kind.value == "management")
            site = Management(client, key)
            for path, body in (
                ("/flags", {"key": SEEDED}),
                ("/segments", {"key": SEEDED, "included": ["u1"]}),
                (
                    "/metrics",
                    {"key": SEEDED, "name": "Fuzzed", "event": "buy", "aggregation": "sum"},
                ),
                ("/experiments", {"key": SEEDED, "name": "Fuzzed", "goal": "buy"}),
                ("/layers", {"key": SEEDED, "name": "Fuzzed"}),
                (
                    "/holdouts",
                    {"key": SEEDED, "name": "Fuzzed", "share": 0.05, "metrics": [SEEDED]},
                ),
            ):
                response = client.post(
                    "/api/v1" + path, json=body, headers={"Authorization": f"Bearer {key}"}
                )
                assert response.status_code == 201, (path, response.text)
            yield site


def openapi_document() -> dict[str, Any]:
    """The control plane's OpenAPI document, with every object that lists its properties closed
    (``additionalProperties: false``): request bodies refuse unknown fields (``ApiIn``), so
    bodies generated with extra fields would all stop there, before any value reaches a rule."""
    app = create_app(Settings(database_url="sqlite://", bootstrap=False))
    document = app.openapi_schema.to_schema()
    for component in document["components"]["schemas"].values():
        if "properties" in component:
            component.setdefault("additionalProperties", False)
    return document


schema = schemathesis.openapi.from_dict(openapi_document()).exclude(
    path="/api/v1/snapshot/stream"  # a stream that stays open; it takes no input
)
schema.config.generation.update(modes=[GenerationMode.POSITIVE])
schema.config.phases.update(phases=["fuzzing"])

BOUNDED = settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


# ------------------------------------------------------------------------------ planting


def _leaves(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield at, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, (*at, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _leaves(child, (*at, i))


def _replace(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    if not at:
        return new
    head, rest = at[0], at[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    return [*value[:head], _replace(value[head], rest, new), *value[head + 1 :]]


def _rename(value: Any, at: tuple[Any, ...], data: st.DataObject, bad: str) -> Any:
    """``value`` with the object key at ``at`` given ``bad``."""
    parent = at[:-1]
    holder = value
    for step in parent:
        holder = holder[step]
    renamed = {(_spoil(k, data, bad) if k == at[-1] else k): v for k, v in holder.items()}
    return _replace(value, parent, renamed)


def _spoil(text: str, data: st.DataObject, bad: str) -> str:
    i = data.draw(st.integers(0, len(text)), label="at")
    return text[:i] + bad + text[i:]


@dataclass
class Request:
    """What is sent: the case's parts, with a value planted (kept apart from the case, whose
    own checks cannot hold a lone surrogate)."""

    method: str
    path: str
    path_parameters: dict[str, Any]
    query: dict[str, Any]
    headers: dict[str, Any]
    body: Any  # NOT_SET: none

    def __str__(self) -> str:
        body = "" if isinstance(self.body, NotSet) else f" {json.dumps(self.body)[:2000]}"
        return f"{self.method} {self.url()}{body}"

    def url(self) -> str:
        path = self.path
        for name, value in self.path_parameters.items():
            path = path.replace("{" + name + "}", _wire(value))
        query = "&".join(
            f"{_wire(name)}={_wire(item)}"
            for name, value in self.query.items()
            for item in (value if isinstance(value, list) else [value])
            if item is not None
        )
        return path + (f"?{query}" if query else "")


def plant(case: OpenApiCase, data: st.DataObject) -> Request:
    """``case`` with one unstorable value put in: text, an object key, an integer or digits."""
    request = Request(
        case.method,
        case.path,
        {  # schemathesis keeps them percent-encoded
            name: unquote(value) if isinstance(value, str) else value
            for name, value in (case.path_parameters or {}).items()
        },
        dict(case.query or {}),
        dict(case.headers or {}),
        case.body,
    )
    for name in request.path_parameters:
        if data.draw(st.booleans(), label=f"known {name}"):
            request.path_parameters[name] = KNOWN.get(name, SEEDED)
    if isinstance(request.body, dict):
        for name, value in SENSIBLE.items():
            if name in request.body and data.draw(st.integers(0, 3), label=name) > 0:
                request.body = {**request.body, name: data.draw(value, label=name)}
    parts: dict[str, Any] = {
        "body": request.body if isinstance(request.body, dict | list) else None,
        "query": request.query or None,
        "path": request.path_parameters or None,
    }
    spots: list[tuple[str, tuple[Any, ...], Any]] = [
        (part, at, leaf)
        for part, value in parts.items()
        if value is not None
        for at, leaf in _leaves(value)
        if at and isinstance(leaf, str | int | float) and not isinstance(leaf, bool)
    ]
    keys = [
        at
        for at, _ in (_leaves(parts["body"]) if parts["body"] is not None else ())
        if at and not isinstance(at[-1], int)
    ]
    if not spots and not keys:
        return request
    kind = data.draw(
        st.sampled_from((["text", "text", "integer"] if spots else []) + (["key"] if keys else [])),
        label="kind",
    )
    if kind == "key":
        at = data.draw(st.sampled_from(keys), label="key")
        request.body = _rename(request.body, at, data, data.draw(BAD_TEXT, label="bad"))
        return request
    part, at, leaf = data.draw(st.sampled_from(spots), label="spot")
    if kind == "text":
        new: Any = _spoil(str(leaf), data, data.draw(BAD_TEXT, label="bad"))
    else:
        big = data.draw(BIG_INTEGERS, label="big")
        new = str(big) if isinstance(leaf, str) else big
    if part == "body":
        request.body = _replace(request.body, at, new)
    elif part == "query":
        request.query = _replace(request.query, at, new)
    else:
        request.path_parameters = _replace(request.path_parameters, at, new)
    return request


# ------------------------------------------------------------------------------ sending


def _wire(value: Any) -> str:
    """A parameter as it goes into a URL: UTF-8 percent-encoded; a lone surrogate as the bytes
    UTF-8 would give it (not UTF-8 at all), which is what a client can put on the wire."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    return quote(str(value).encode("utf-8", "surrogatepass"), safe="")


def send(site: Management, request: Request) -> Any:
    headers = {
        name: value
        for name, value in request.headers.items()
        if isinstance(value, str) and value.isascii() and value.isprintable()
    }
    headers["Authorization"] = f"Bearer {site.key}"
    content = None
    if not isinstance(request.body, NotSet):
        raw = request.body
        content = (
            raw if isinstance(raw, bytes) else json.dumps(raw).encode()
        )  # ensure_ascii: "\u0000", "\ud800" escapes
        headers["Content-Type"] = "application/json"
    return site.client.request(request.method, request.url(), content=content, headers=headers)


@schema.given(data=st.data())
@schema.parametrize()
@BOUNDED
def test_no_unstorable_value_reaches_the_database(
    case: OpenApiCase, data: st.DataObject, management: Management
) -> None:
    request = plant(case, data)
    response = send(management, request)
    assert response.status_code < 500, f"{request}\n-> {response.status_code} {response.text}"
