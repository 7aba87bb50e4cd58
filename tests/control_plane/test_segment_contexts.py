"""Segments list keys of other context kinds (issue #35): ``includedContexts`` and
``excludedContexts`` as LaunchDarkly names them (``[{contextKind, values}]``), accepted, returned,
validated naming the field, versioned, audited and evaluated by the engine the relays run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create, fields
from tests.control_plane.test_preview import preview

RULES = "/flags/checkout-flow/environments/staging/rules"
SETTINGS = "/flags/checkout-flow/environments/staging"
ACME = {"contextKind": "org", "values": ["acme", "initech", "acme"]}


def uses_segment(api: Api, key: str) -> None:
    """``checkout-flow`` on in staging, serving idx 2 to members of segment ``key``, else 0."""
    create(api, MULTI)
    on = api.put(SETTINGS, {"enabled": True, "fallthrough": {"variation": 0}})
    assert on.status_code == 200, on.text
    rules = {"rules": [{"clauses": [{"segment": key, "op": "segmentMatch"}], "variation": 2}]}
    put = api.put(RULES, rules)
    assert put.status_code == 200, put.text


def test_included_and_excluded_contexts_are_stored_returned_and_audited(api: Api) -> None:
    created = api.post(
        "/segments",
        {
            "key": "accounts",
            "included": ["u1"],
            "includedContexts": [ACME, {"contextKind": "device", "values": ["d-7"]}],
            "excludedContexts": [{"contextKind": "org", "values": ["globex"]}],
        },
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["includedContexts"] == [
        {"contextKind": "org", "values": ["acme", "initech"]},  # each key once, in order
        {"contextKind": "device", "values": ["d-7"]},
    ]
    assert body["excludedContexts"] == [{"contextKind": "org", "values": ["globex"]}]
    assert api.get("/segments/accounts").json() == body
    # a segment made before (or without) them shows empty lists
    plain = api.post("/segments", {"key": "plain"}).json()
    assert (plain["includedContexts"], plain["excludedContexts"]) == ([], [])

    patched = api.patch(
        "/segments/accounts", {"includedContexts": [{"contextKind": "org", "values": ["umbrella"]}]}
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["includedContexts"] == [{"contextKind": "org", "values": ["umbrella"]}]
    assert patched.json()["excludedContexts"] == body["excludedContexts"]  # left as it was
    assert patched.json()["included"] == ["u1"]
    assert patched.json()["version"] == body["version"] + 1

    history = api.get("/segments/accounts/audit").json()["entries"]
    update = history[0]
    assert update["action"] == "segment.update"
    assert update["before"]["includedContexts"] == body["includedContexts"]
    assert update["after"]["includedContexts"] == [{"contextKind": "org", "values": ["umbrella"]}]


def test_an_organization_listed_in_a_segment_matches_through_the_engine(api: Api) -> None:
    made = api.post(
        "/segments",
        {
            "key": "accounts",
            "includedContexts": [{"contextKind": "org", "values": ["acme"]}],
            "excludedContexts": [{"contextKind": "org", "values": ["globex"]}],
            "rules": [
                {"clauses": [{"contextKind": "org", "attribute": "plan", "values": ["pro"]}]}
            ],
        },
    )
    assert made.status_code == 201, made.text
    uses_segment(api, "accounts")
    acme = preview(api, {"kind": "org", "key": "acme"})
    assert (acme["variation"], acme["reason"]) == (2, "RULE_MATCH")
    # a user of acme, in a multi-kind context
    member = preview(api, {"kind": "multi", "user": {"key": "u1"}, "org": {"key": "acme"}})
    assert member["variation"] == 2
    # the user "acme" is not the organization acme
    assert preview(api, {"key": "acme"})["variation"] == 0
    # excluded before its rules: globex on the pro plan is out, initech on it is in
    assert preview(api, {"kind": "org", "key": "globex", "plan": "pro"})["variation"] == 0
    assert preview(api, {"kind": "org", "key": "initech", "plan": "pro"})["variation"] == 2

    # a change to the lists is published: acme is out once it is excluded
    moved = api.patch(
        "/segments/accounts",
        {"includedContexts": [], "excludedContexts": [{"contextKind": "org", "values": ["acme"]}]},
    )
    assert moved.status_code == 200, moved.text
    assert preview(api, {"kind": "org", "key": "acme", "plan": "pro"})["variation"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"includedContexts": [{"contextKind": "multi", "values": ["a"]}]},
            "includedContexts[0].contextKind",
        ),
        (
            {"includedContexts": [{"contextKind": "org one", "values": ["a"]}]},
            "includedContexts[0].contextKind",
        ),
        ({"includedContexts": [{"values": ["a"]}]}, "includedContexts[0].contextKind"),
        (
            {"excludedContexts": [{"contextKind": "org", "values": ["a", ""]}]},
            "excludedContexts[0].values[1]",
        ),
        (
            {
                "includedContexts": [
                    {"contextKind": "org", "values": ["a"]},
                    {"contextKind": "org", "values": ["b"]},
                ]
            },
            "includedContexts[1].contextKind",
        ),
        ({"includedContexts": [{"contextKind": "org", "values": "acme"}]}, "values"),
        ({"includedContexts": {"org": ["acme"]}}, "includedContexts"),
    ],
)
def test_bad_context_lists_name_their_field(
    refusing_api: Api, body: dict[str, Any], field: str
) -> None:
    response = refusing_api.post("/segments", {"key": "s", **body})
    assert response.status_code == 422, response.text
    assert any(field in name for name in fields(response)), fields(response)
    assert refusing_api.get("/segments").json()["count"] == 0


def test_a_bad_patch_changes_nothing(api: Api) -> None:
    made = api.post(
        "/segments", {"key": "s", "includedContexts": [{"contextKind": "org", "values": ["a"]}]}
    )
    assert made.status_code == 201, made.text
    refused = api.patch(
        "/segments/s", {"includedContexts": [{"contextKind": "kind", "values": []}]}
    )
    assert refused.status_code == 422, refused.text
    assert fields(refused) == ["includedContexts[0].contextKind"]
    assert api.get("/segments/s").json() == made.json()
