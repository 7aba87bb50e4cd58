"""Every list pages (``limit``, an opaque ``cursor``, ``nextCursor``/``hasMore``) and filters;
bad parameters are 422 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, insert, select

from control_plane.db.engine import sync_url
from control_plane.db.ids import new_id
from control_plane.db.models import Environment, Flag, FlagSetting, Project
from tests.conftest import Api
from tests.control_plane.test_flags import create, fields

FLAGS = 1200


def every_page(api: Api, path: str, items: str, **params: Any) -> list[dict[str, Any]]:
    """Follow ``nextCursor`` to the end; check each page's own bookkeeping on the way."""
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = api.get(path, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["count"] == len(page[items])
        assert page["hasMore"] is (page["nextCursor"] is not None)
        if page["hasMore"]:
            assert len(page[items]) == int(params.get("limit", 50))
        seen.extend(page[items])
        cursor = page["nextCursor"]
        if cursor is None:
            return seen


def seed_flags(api: Api, bodies: list[dict[str, Any]], archived: set[str]) -> None:
    """Write flags straight into the database as the API would have (a flag row and a disabled
    setting per environment): creating 1,200 through the API recompiles a growing snapshot
    each time, which is not what this test is about."""
    engine = create_engine(sync_url(api.database_url))
    now = datetime.now(UTC)
    try:
        with engine.begin() as connection:
            project = connection.scalar(select(Project.id).where(Project.key == "default"))
            environments = list(connection.scalars(select(Environment.id)))
            flags, settings = [], []
            for body in bodies:
                flag_id = new_id("flg")
                boolean = body.get("type", "boolean") == "boolean"
                variations = (
                    [
                        {"idx": 0, "value": True, "name": "on"},
                        {"idx": 1, "value": False, "name": "off"},
                    ]
                    if boolean
                    else [
                        {"idx": i, **v, "name": v["value"]}
                        for i, v in enumerate(body["variations"])
                    ]
                )
                flags.append(
                    {
                        "id": flag_id,
                        "project_id": project,
                        "key": body["key"],
                        "name": body["name"],
                        "description": "",
                        "type": body.get("type", "boolean"),
                        "variations": variations,
                        "temporary": body["temporary"],
                        "bucket_by": "key",
                        "tags": body["tags"],
                        "client_side": True,
                        "archived": body["key"] in archived,
                        "archived_at": now if body["key"] in archived else None,
                        "version": 1,
                        "created_at": now,
                        "updated_at": now,
                    }
                )
                settings += [
                    {
                        "flag_id": flag_id,
                        "environment_id": env,
                        "enabled": False,
                        "off_variation": 1,
                        "fallthrough": {"variation": 0},
                        "rules": [],
                        "targets": [],
                        "prerequisites": [],
                        "version": 1,
                        "updated_at": now,
                    }
                    for env in environments
                ]
            connection.execute(insert(Flag), flags)
            connection.execute(insert(FlagSetting), settings)
    finally:
        engine.dispose()


def test_paging_through_1200_flags_with_filters_returns_each_once(api: Api) -> None:
    expected: dict[str, dict[str, Any]] = {}
    for i in range(FLAGS):
        body: dict[str, Any] = {
            "key": f"flag-{i:04d}",
            "name": f"Feature {i} {'Checkout' if i % 10 == 0 else 'Nav'}",
            "tags": ["even" if i % 2 == 0 else "odd", *(["team-a"] if i % 3 == 0 else [])],
            "temporary": i % 4 != 0,
        }
        if i % 5 == 0:
            body["type"] = "string"
            body["variations"] = [{"value": "a"}, {"value": "b"}]
        expected[body["key"]] = body
    archived = [f"flag-{i:04d}" for i in range(0, FLAGS, 12)]
    seed_flags(api, list(expected.values()), set(archived))
    # one flag through the API beside them, archived the way a user archives
    create(api, {"key": "flag-9999", "name": "Feature via API", "tags": ["odd"]})
    assert api.post("/flags/flag-9999/archive").status_code == 200
    expected["flag-9999"] = {"key": "flag-9999", "name": "Feature via API", "tags": ["odd"]}
    expected["flag-9999"]["temporary"] = True
    archived.append("flag-9999")
    live = sorted(set(expected) - set(archived))

    first = api.get("/flags").json()
    assert first["count"] == 50
    assert first["hasMore"] is True
    assert [f["key"] for f in first["flags"]] == live[:50]

    listed = [f["key"] for f in every_page(api, "/flags", "flags", limit=500)]
    assert listed == live  # each live flag once, in key order
    # a flag created while someone pages appears once, not twice, and nothing is skipped
    page = api.get("/flags", params={"limit": 7}).json()
    create(api, {"key": "aaa-created-meanwhile"})
    rest = every_page(api, "/flags", "flags", limit=333, cursor=page["nextCursor"])
    assert [f["key"] for f in page["flags"]] + [f["key"] for f in rest] == live

    def keys(**params: Any) -> list[str]:
        return [f["key"] for f in every_page(api, "/flags", "flags", limit=97, **params)]

    assert keys(archived="only") == archived
    assert keys(archived="true") == sorted([*expected, "aaa-created-meanwhile"])
    assert keys(tag="team-a") == [k for k in live if "team-a" in expected[k]["tags"]]
    assert keys(tag="odd", type="string") == [
        k for k in live if "odd" in expected[k]["tags"] and expected[k].get("type") == "string"
    ]
    assert keys(q="checkout") == [k for k in live if "Checkout" in expected[k]["name"]]
    assert keys(q="FLAG-00") == [k for k in live if k.startswith("flag-00")]
    assert keys(temporary="false", archived="only") == [
        k for k in archived if not expected[k]["temporary"]
    ]
    assert keys(q="%") == []  # a LIKE wildcard is a character like any other


def test_stale_flags_are_temporary_unreferenced_and_unchanged(api: Api) -> None:
    create(api, {"key": "old-experiment"})
    create(api, {"key": "in-code"})
    create(api, {"key": "permanent", "temporary": False})
    upload = {
        "repository": "shop",
        "branch": "main",
        "refs": [{"flagKey": "in-code", "path": "app.py", "line": 1, "snippet": "in-code"}],
    }
    assert api.put("/code-refs", upload).status_code == 200
    stale = api.get("/flags", params={"stale": 0}).json()["flags"]
    assert [f["key"] for f in stale] == ["old-experiment"]
    # nothing has been left alone for a day yet
    assert api.get("/flags", params={"stale": 1}).json()["flags"] == []


def test_other_lists_page_and_filter(api: Api) -> None:
    for i in range(7):
        body: dict[str, Any] = {
            "name": f"Exp {i}",
            "type": "manual" if i % 2 else "element",
            "goal": "buy",
        }
        if i % 2 == 0:
            body["selector"] = "#hero"
        body["activate"] = i < 3
        assert api.post("/experiments", body).status_code == 201
    experiments = every_page(api, "/experiments", "experiments", limit=2)
    assert [e["name"] for e in experiments] == [f"Exp {i}" for i in range(7)]
    drafts = every_page(api, "/experiments", "experiments", limit=2, status="draft")
    assert [e["name"] for e in drafts] == ["Exp 3", "Exp 4", "Exp 5", "Exp 6"]
    manual = every_page(api, "/experiments", "experiments", status="running", type="manual")
    assert [e["name"] for e in manual] == ["Exp 1"]
    assert [e["name"] for e in every_page(api, "/experiments", "experiments", q="exp 5")] == [
        "Exp 5"
    ]

    for i in range(5):
        metric = {
            "name": f"M{i}",
            "event": "purchase" if i % 2 else "signup",
            "aggregation": "count",
        }
        assert api.post("/metrics", metric).status_code == 201
    metrics = every_page(api, "/metrics", "metrics", limit=2, event="purchase")
    assert [m["name"] for m in metrics] == ["M1", "M3"]

    for i in range(3):
        key = {"kind": "public", "environment": "staging", "name": f"web {i}"}
        assert api.post("/keys", key).status_code == 201
    public = every_page(api, "/keys", "keys", limit=2, kind="public", environment="staging")
    assert [k["name"] for k in public] == ["web 0", "web 1", "web 2"]
    everything = every_page(api, "/keys", "keys", limit=3)
    assert len({k["id"] for k in everything}) == len(everything) >= 7

    for i in range(3):
        assert api.post("/segments", {"key": f"seg-{i}", "included": ["u"]}).status_code == 201
    segments = every_page(api, "/segments", "segments", limit=2)
    assert [x["key"] for x in segments] == ["seg-0", "seg-1", "seg-2"]
    environments = every_page(api, "/environments", "environments", limit=1)
    assert [x["key"] for x in environments] == ["production", "staging"]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/flags", {"limit": 0}, "limit"),
        ("/flags", {"limit": 501}, "limit"),
        ("/flags", {"limit": "many"}, "limit"),
        ("/flags", {"cursor": "not-a-cursor"}, "cursor"),
        ("/flags", {"type": "float"}, "type"),
        ("/flags", {"archived": "maybe"}, "archived"),
        ("/flags", {"temporary": "sometimes"}, "temporary"),
        ("/flags", {"stale": -1}, "stale"),
        ("/experiments", {"status": "paused"}, "status"),
        ("/experiments", {"type": "popup"}, "type"),
        ("/keys", {"kind": "root"}, "kind"),
        ("/keys", {"environment": "nowhere"}, "environment"),
        ("/metrics", {"limit": 10_000}, "limit"),
        ("/segments", {"cursor": ""}, "cursor"),
    ],
)
def test_bad_list_parameters_are_422_naming_the_parameter(
    refusing_api: Api, path: str, params: dict[str, Any], field: str
) -> None:
    response = refusing_api.get(path, params=params)
    assert response.status_code == 422, response.text
    assert fields(response) == [field]


def test_a_cursor_of_another_list_is_refused(api: Api) -> None:
    for i in range(3):
        create(api, {"key": f"f{i}"})
    cursor = api.get("/flags", params={"limit": 1}).json()["nextCursor"]
    response = api.get("/segments", params={"cursor": cursor})
    assert response.status_code == 422
    assert fields(response) == ["cursor"]


CURSORS = st.one_of(
    st.text(max_size=16),
    st.builds(  # the events' ts:id shape, its digits from any script
        lambda ts, rest: f"{ts}:{rest}",
        st.text(alphabet="0123456789²³¹٣੩", min_size=1, max_size=25),
        st.text(max_size=6),
    ),
)


@pytest.mark.parametrize("path", ["/events", "/audit", "/flags", "/segments", "/experiments"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cursor=CURSORS)
def test_a_cursor_no_page_handed_out_is_a_422_naming_it(
    refusing_api: Api, path: str, cursor: str
) -> None:
    """The rule of every list's cursor: one the API did not hand out is refused naming
    ``cursor``, never a 5xx, whatever its characters (superscripts and other scripts' digits
    pass ``str.isdigit`` and fail ``int``: the events' ``ts:id`` once answered "²" with a 500)."""
    response = refusing_api.get(path, params={"cursor": cursor})
    if response.status_code == 200:  # well formed: reads as a position, past every row
        return
    assert response.status_code == 422, (cursor, response.text)
    assert fields(response) == ["cursor"]
