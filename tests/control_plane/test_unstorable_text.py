"""Text no database stores (a NUL, a lone surrogate) is a 422 naming the field, never a 500.

PostgreSQL refuses NUL in ``text`` and ``jsonb``; SQLite keeps it. The rule is checked once at
the edge (every JSON body, every query and path parameter, every console form), so the same
write is refused alike on both databases, and nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Api

BAD = "<BAD>"
NUL = "a\x00b"
SURROGATE = (
    "a\ud800b"  # sent as the JSON escape "\ud800", which msgspec alone refuses as "not JSON"
)

Case = tuple[str, str, Any, str, str]
"""(method, path, body with BAD where the bad text goes, the field named, GET that must not change)"""

BODIES: list[Case] = [
    ("POST", "/flags", {"key": "n", "name": BAD}, "name", "/flags"),
    ("POST", "/flags", {"key": "n", "description": BAD}, "description", "/flags"),
    (
        "POST",
        "/flags",
        {"key": "n", "type": "string", "variations": [{"value": "a"}, {"value": BAD}]},
        "variations[1].value",
        "/flags",
    ),
    (
        "POST",
        "/flags",
        {"key": "n", "type": "json", "variations": [{"value": {"k": [BAD]}}, {"value": {}}]},
        "variations[0].value.k[0]",
        "/flags",
    ),
    (
        "POST",
        "/flags",
        {"key": "n", "type": "json", "variations": [{"value": {BAD: 1}}, {"value": {}}]},
        "variations[0].value",  # a key of the object there
        "/flags",
    ),
    ("POST", "/flags", {"key": "n", "tags": ["ok", BAD]}, "tags[1]", "/flags"),
    ("PATCH", "/flags/f", {"name": BAD}, "name", "/flags/f"),
    (
        "PUT",
        "/flags/f/environments/production/rules",
        {"rules": [{"clauses": [{"attribute": BAD, "op": "in", "values": ["x"]}], "variation": 0}]},
        "rules[0].clauses[0].attribute",
        "/flags/f/environments/production/rules",
    ),
    (
        "PUT",
        "/flags/f/environments/production/rules",
        {
            "rules": [
                {"clauses": [{"attribute": "a", "op": "in", "values": ["x", BAD]}], "variation": 0}
            ]
        },
        "rules[0].clauses[0].values[1]",
        "/flags/f/environments/production/rules",
    ),
    (
        "PUT",
        "/flags/f/environments/production",
        {"targets": [{"variation": 0, "values": [BAD]}]},
        "targets[0].values[0]",
        "/flags/f/environments/production",
    ),
    ("POST", "/segments", {"key": "s2", "included": [BAD]}, "included[0]", "/segments"),
    ("PATCH", "/segments/s", {"excluded": [BAD]}, "excluded[0]", "/segments/s"),
    ("POST", "/environments", {"key": "qa", "name": BAD}, "name", "/environments"),
    ("POST", "/keys", {"kind": "management", "name": BAD}, "name", "/keys"),
    (
        "POST",
        "/webhooks",
        {"url": "https://hooks.example/x", "events": ["flag.updated"], "description": BAD},
        "description",
        "/webhooks",
    ),
    ("POST", "/experiments", {"name": BAD, "goal": "signup"}, "name", "/experiments"),
    ("PATCH", "/experiments/e", {"description": BAD}, "description", "/experiments/e"),
    ("POST", "/metrics", {"name": BAD, "event": "e", "aggregation": "count"}, "name", "/metrics"),
    ("PATCH", "/metrics/m", {"description": BAD}, "description", "/metrics/m"),
    (
        "PUT",
        "/code-refs",
        {
            "repository": "shop",
            "refs": [{"flagKey": "f", "path": "a.py", "line": 1, "snippet": BAD}],
        },
        "refs[0].snippet",
        "/flags/f/code-refs",
    ),
]

FILTERS = [("/flags", "q"), ("/events", "unit"), ("/events", "event"), ("/audit", "actor")]


def _with(value: Any, bad: str) -> Any:
    if value == BAD:
        return bad
    if isinstance(value, dict):
        return {_with(k, bad): _with(v, bad) for k, v in value.items()}
    if isinstance(value, list):
        return [_with(v, bad) for v in value]
    return value


def _setup(api: Api) -> None:
    flag = {"key": "f", "type": "string", "variations": [{"value": "a"}, {"value": "b"}]}
    for path, body in [
        ("/flags", flag),
        ("/segments", {"key": "s"}),
        ("/experiments", {"name": "E", "key": "e", "goal": "signup"}),
        ("/metrics", {"name": "M", "key": "m", "event": "e", "aggregation": "count"}),
    ]:
        response = api.post(path, body)
        assert response.status_code == 201, response.text


def _refused(response: Any, field: str, words: str) -> None:
    assert response.status_code == 422, (response.status_code, response.text)
    error = response.json()["error"]
    assert error["details"][0]["field"] == field, error
    assert words in error["details"][0]["message"], error


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
def test_unstorable_text_in_a_body_is_422_naming_the_field(api: Api, bad: str) -> None:
    _setup(api)
    words = "NUL" if bad == NUL else "surrogate"
    for method, path, template, field, check in BODIES:
        before = api.get(check).json()
        raw = json.dumps(_with(template, bad))  # ensure_ascii: "\u0000", "\ud800"
        response = api.request(
            method, path, content=raw.encode(), headers={"Content-Type": "application/json"}
        )
        _refused(response, field, words)
        assert api.get(check).json() == before, f"{method} {path} wrote something"


def test_a_nul_in_a_filter_or_a_path_is_422_naming_the_parameter(api: Api) -> None:
    _setup(api)
    for path, name in FILTERS:
        _refused(api.get(path, params={name: NUL}), name, "NUL")
    _refused(api.get("/flags/f%00x"), "key", "NUL")
    _refused(api.get("/experiments/e%00x"), "id_or_key", "NUL")
    # ill-formed UTF-8 in a query is read with replacement characters: harmless, not a 5xx
    assert api.get("/flags?q=%ED%A0%80").status_code == 200


def test_a_console_form_with_a_nul_shows_the_error_beside_the_field(api: Api) -> None:
    from tests.control_plane.test_console_http import signed_in

    _, csrf = signed_in(api)
    before = api.get("/flags").json()

    def create(name: str) -> Any:
        return api.client.post(
            "/console/flags/",
            content=f"_csrf={csrf}&key=fresh&name={name}".encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=False,
        )

    refused = create("a%00b")
    assert refused.status_code == 422, refused.text
    assert 'id="err-name">must not contain NUL' in refused.text
    assert api.get("/flags").json() == before
    # ill-formed UTF-8 (a lone surrogate's bytes) is read with replacement characters
    assert create("a%ED%A0%80b").status_code == 303


def test_a_console_page_with_a_nul_in_its_query_is_the_console_s_error_page(api: Api) -> None:
    """The parameter rule's 422 on a console path is a page (the console's own error page, the
    same message), not the API's JSON; the API's paths keep their JSON."""
    from tests.control_plane.test_console_http import signed_in

    signed_in(api)
    for path in ("/console/flags?q=a%00b", "/console/audit?actor=%00", "/console/flags/f%00x"):
        answer = api.client.get(path, follow_redirects=False)
        assert answer.status_code == 422, (path, answer.text)
        assert answer.headers["content-type"].startswith("text/html"), path
        assert "must not contain NUL" in answer.text, path
        assert 'role="alert"' in answer.text, path
    assert api.get("/flags", params={"q": NUL}).headers["content-type"] == "application/json"


def test_a_code_reference_line_beyond_the_column_is_422_not_500(api: Api) -> None:
    _setup(api)
    for line in (2**31, 2**63):
        ref = {"flagKey": "f", "path": "a.py", "line": line}
        response = api.put("/code-refs", {"repository": "shop", "refs": [ref]})
        _refused(response, "refs[0].line", "lines count from 1")
    assert api.get("/flags/f/code-refs").json()["count"] == 0
