"""``/v1/...`` is the API's short alias: every answer is exactly its ``/api/v1/...`` twin's.

Reads are asked twice, once under each prefix, and must answer with the same status, headers and
bytes; refused writes (which change nothing) likewise; the answers that name the path they were
asked on (no such endpoint, method not allowed) name the one asked, ``/v1/...`` under the alias.
Writes through the alias are read back through ``/api/v1`` and the other way round.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

VARYING = {"date"}  # the clock's second, not the route's doing


def answer(api: Api, method: str, prefix: str, path: str, **kwargs: Any) -> tuple[Any, ...]:
    headers = {**api.headers(api.key), **kwargs.pop("headers", {})}
    response = api.client.request(method, prefix + path, headers=headers, **kwargs)
    kept = sorted((k, v) for k, v in response.headers.multi_items() if k not in VARYING)
    return response.status_code, kept, response.content


def twins(api: Api, method: str, path: str, **kwargs: Any) -> tuple[tuple[Any, ...], ...]:
    return (
        answer(api, method, "/api/v1", path, **dict(kwargs)),
        answer(api, method, "/v1", path, **dict(kwargs)),
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_v1_answers_exactly_as_api_v1(api: Api) -> None:
    assert api.post("/flags", {"key": "shown", "description": "a flag"}).status_code == 201
    assert api.post("/segments", {"key": "beta", "name": "Beta"}).status_code == 201
    etag = api.get("/flags/shown").headers["etag"]
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/flags", {}),
        ("GET", "/flags/shown", {}),
        ("GET", "/flags/shown/", {}),
        ("GET", "/flags/shown", {"headers": {"If-None-Match": etag}}),
        ("GET", "/flags?limit=1", {}),
        ("GET", "/segments/beta", {}),
        ("GET", "/environments", {}),
        ("GET", "/keys", {}),
        ("GET", "/audit", {}),
        ("GET", "/flags/missing", {}),
        ("GET", "/flags", {"headers": {"Authorization": ""}}),
        ("GET", "/flags", {"headers": {"Authorization": "Bearer vsk_nonsense"}}),
        ("OPTIONS", "/flags", {}),
        ("POST", "/flags", {"json": {"key": "Bad Key!"}}),
        (
            "POST",
            "/flags",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        ),
        ("POST", "/flags", {"json": {"key": "shown"}}),
        ("PATCH", "/flags/shown", {"json": {"description": 5}}),
        ("PATCH", "/flags/shown", {"json": {"description": "x"}, "headers": {"If-Match": '"9"'}}),
    ]
    for method, path, kwargs in cases:
        via_api, via_v1 = twins(api, method, path, **kwargs)
        assert via_v1 == via_api, (method, path, kwargs)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("method", "path"), [("GET", "/no/such/thing"), ("DELETE", "/flags")])
def test_answers_naming_the_path_name_the_one_asked(api: Api, method: str, path: str) -> None:
    via_api, via_v1 = twins(api, method, path)
    assert via_api[0] == via_v1[0]
    assert via_api[0] in {404, 405}
    assert b"/api/v1" + path.encode() in via_api[2]
    assert via_v1[2] == via_api[2].replace(b"/api/v1/", b"/v1/")
    assert unordered(via_v1[1]) == unordered(via_api[1])


def unordered(headers: list[tuple[str, str]]) -> dict[str, set[str]]:
    """Headers to compare: the body's length aside (it names the path), ``Allow`` as a set (the
    router lists the methods in a set's order, which may differ between two equal sets)."""
    return {
        name: set(value.split(", ")) if name == "allow" else {value}
        for name, value in headers
        if name != "content-length"
    }


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_writes_through_either_prefix_are_one_api(api: Api) -> None:
    headers = api.headers(api.key)
    made = api.client.post("/v1/flags", json={"key": "via-v1"}, headers=headers)
    assert made.status_code == 201
    assert api.get("/flags/via-v1").json() == made.json()
    changed = api.patch("/flags/via-v1", {"description": "changed"})
    assert changed.status_code == 200
    assert api.client.get("/v1/flags/via-v1", headers=headers).json() == changed.json()
    archived = api.client.post("/v1/flags/via-v1/archive", headers=headers)
    assert archived.status_code == 200
    assert api.get("/flags/via-v1").json() == archived.json()
    assert api.client.delete("/v1/flags/via-v1", headers=headers).status_code == 200
    assert api.get("/flags/via-v1").status_code == 404
