"""A flag's own fields that decide what every environment serves (its variations' values,
``bucketBy``, ``clientSide``, whether it is archived) change by change request where an
environment is protected (issue #34), over HTTP on SQLite and PostgreSQL: the direct writes answer
409 for every role, the request's item names the flag and carries the body of
``PATCH /flags/{key}`` (``flagPatch``) or ``archived``, it is reviewed, applied through the flags'
own service and audited with the request; what moved is named; bad items name their field; the
flag's description, tags and a new variation nobody serves stay direct writes."""

from __future__ import annotations

from typing import Any

from tests.changes.conftest import Team, apply_approved, propose
from tests.conftest import Api

FLAG = "/flags/checkout"


def string_flag(api: Api) -> None:
    made = api.post(
        "/flags",
        {"key": "banner", "type": "string", "variations": [{"value": "off"}, {"value": "blue"}]},
    )
    assert made.status_code == 201, made.text


def test_direct_writes_of_what_every_environment_serves_answer_409_for_every_role(
    team: Team,
) -> None:
    api = team.api
    string_flag(api)
    assert api.post("/flags", {"key": "old"}).status_code == 201
    assert api.patch("/environments/production", {"requiredApprovals": 0}).status_code == 200
    assert api.post("/flags/old/archive").status_code == 200  # archived before production was
    assert api.patch("/environments/production", {"requiredApprovals": 1}).status_code == 200
    writes = [
        (
            "PATCH",
            "/flags/banner",
            {"variations": [{"idx": 0, "value": "off"}, {"idx": 1, "value": "red"}]},
        ),
        ("PATCH", FLAG, {"bucketBy": "account"}),
        ("PATCH", FLAG, {"clientSide": False}),
        ("POST", FLAG + "/archive", None),
        ("POST", "/flags/old/restore", None),
    ]
    for key in (api.key, team.admin, team.editor, team.oncall):
        for method, path, body in writes:
            refused = api.request(method, path, json=body, key=key)
            assert refused.status_code == 409, (method, path, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "approval_required"
            assert "/api/v1/change-requests" in error["message"]
            assert {d["field"] for d in error["details"]} == {"environment"}
    for method, path, body in writes:  # permission first
        assert api.request(method, path, json=body, key=team.viewer).status_code == 403
    banner = api.get("/flags/banner").json()
    assert [v["value"] for v in banner["variations"]] == ["off", "blue"]
    flag = api.get(FLAG).json()
    assert (flag["bucketBy"], flag["clientSide"], flag["archived"]) == ("key", True, False)
    assert api.get("/flags/old").json()["archived"] is True

    # what serves nothing anywhere stays a direct write: words, tags, a new variation, a name
    fine = api.patch(
        "/flags/banner",
        {
            "description": "the top banner",
            "tags": ["web"],
            "variations": [
                {"idx": 0, "value": "off", "name": "none"},
                {"idx": 1, "value": "blue"},
                {"value": "green"},
            ],
        },
        key=team.editor,
    )
    assert fine.status_code == 200, fine.text
    assert [v["value"] for v in fine.json()["variations"]] == ["off", "blue", "green"]
    # and nothing is gated once no environment is protected
    assert api.patch("/environments/production", {"requiredApprovals": 0}).status_code == 200
    assert api.patch(FLAG, {"bucketBy": "account"}).status_code == 200


def test_a_flags_own_change_is_proposed_reviewed_and_applied(team: Team) -> None:
    api = team.api
    string_flag(api)
    patch = {
        "variations": [{"idx": 0, "value": "off"}, {"idx": 1, "value": "red"}],
        "bucketBy": "account",
    }
    request = propose(
        api,
        team.editor,
        title="Red banner, per account",
        changes=[{"flag": "banner", "flagPatch": patch}],
    )
    assert request["requiredApprovals"] == 1
    (change,) = request["changes"]
    assert change["flag"] == "banner"
    assert change["flagPatch"] == patch
    assert change["baseVersion"] == change["liveVersion"] == 1
    diff = {d["field"]: d for d in change["diff"]}
    assert diff["bucketBy"] == {
        "field": "bucketBy",
        "before": "key",
        "after": "account",
        "changed": True,
    }
    assert [v["value"] for v in diff["variations"]["before"]] == ["off", "blue"]
    assert diff["variations"]["changed"] is True
    assert api.get("/flags/banner").json()["bucketBy"] == "key"  # not yet

    own = api.post(f"/change-requests/{request['id']}/approve", {}, key=team.editor)
    assert own.status_code == 403, own.text
    applied = apply_approved(team, request["id"])
    assert applied["status"] == "applied"
    live = api.get("/flags/banner").json()
    assert live["bucketBy"] == "account"
    assert [v["value"] for v in live["variations"]] == ["off", "red"]
    history = api.get("/flags/banner/audit").json()["entries"]
    (update,) = [e for e in history if e["action"] == "flag.update"]
    assert update["after"]["changeRequest"]["id"] == request["id"]
    assert update["after"]["changeRequest"]["approvers"] == ["key 'reviewer-admin'"]

    archiving = propose(
        api, team.editor, title="Retire checkout", changes=[{"flag": "checkout", "archived": True}]
    )
    (item,) = archiving["changes"]
    assert item["archived"] is True
    assert {d["field"]: (d["before"], d["after"]) for d in item["diff"]} == {
        "archived": (False, True)
    }
    apply_approved(team, archiving["id"])
    assert api.get(FLAG).json()["archived"] is True
    restoring = propose(
        api, team.editor, title="Bring it back", changes=[{"flag": "checkout", "archived": False}]
    )
    apply_approved(team, restoring["id"])
    assert api.get(FLAG).json()["archived"] is False


def test_a_flag_that_moved_since_the_request_is_not_applied(team: Team) -> None:
    api = team.api
    first = propose(
        api, team.editor, changes=[{"flag": "checkout", "flagPatch": {"bucketBy": "account"}}]
    )
    second = propose(
        api, team.editor, changes=[{"flag": "checkout", "flagPatch": {"clientSide": False}}]
    )
    apply_approved(team, first["id"])
    assert (
        api.post(f"/change-requests/{second['id']}/approve", {}, key=team.admin).status_code == 200
    )
    refused = api.post(f"/change-requests/{second['id']}/apply", key=team.editor)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "base_moved"
    assert [d["field"] for d in error["details"]] == ["checkout.bucketBy"]
    (item,) = api.get(f"/change-requests/{second['id']}").json()["changes"]
    assert [(m["field"], m["base"], m["live"]) for m in item["moved"]] == [
        ("bucketBy", "key", "account")
    ]
    assert api.get(FLAG).json()["clientSide"] is True


def test_a_flags_own_change_needs_the_approvals_of_every_protected_environment(team: Team) -> None:
    api = team.api
    assert api.patch("/environments/production", {"requiredApprovals": 2}).status_code == 200
    request = propose(
        api,
        team.editor,
        environment="staging",
        changes=[{"flag": "checkout", "flagPatch": {"bucketBy": "account"}}],
    )
    assert request["requiredApprovals"] == 2
    assert (
        api.post(f"/change-requests/{request['id']}/approve", {}, key=team.admin).status_code == 200
    )
    short = api.post(f"/change-requests/{request['id']}/apply", key=team.editor)
    assert short.status_code == 409
    assert short.json()["error"]["code"] == "approvals_missing"


def test_bad_flag_items_name_their_field(team: Team) -> None:
    api = team.api
    cases: list[tuple[dict[str, Any], str]] = [
        ({"flag": "checkout", "flagPatch": {}}, "changes[0].flagPatch"),
        ({"flag": "nope", "archived": True}, "changes[0].flag"),
        ({"flag": "checkout", "archived": True, "rules": []}, "changes[0]"),
        ({"flag": "checkout", "flagPatch": {"bucketBy": " "}}, "changes[0].bucketBy"),
        (
            {"flag": "checkout", "flagPatch": {"variations": [{"idx": 7, "value": True}]}},
            "changes[0].variations[0].idx",
        ),
        ({"flag": "checkout", "archived": False}, "changes[0]"),  # not archived: nothing to restore
        ({"segment": "vips", "flagPatch": {"bucketBy": "a"}}, "changes[0].flagPatch"),
    ]
    for item, field in cases:
        refused = api.post(
            "/change-requests",
            {"environment": "production", "title": "bad", "changes": [item]},
            key=team.editor,
        )
        assert refused.status_code in (409, 422), (item, refused.text)
        assert field in [d["field"] for d in refused.json()["error"]["details"]], (
            item,
            refused.text,
        )
    twice = api.post(
        "/change-requests",
        {
            "environment": "production",
            "title": "twice",
            "changes": [
                {"flag": "checkout", "archived": True},
                {"flag": "checkout", "flagPatch": {"clientSide": False}},
            ],
        },
        key=team.editor,
    )
    assert twice.status_code == 422
    assert [d["field"] for d in twice.json()["error"]["details"]] == ["changes[1].flag"]
    # a flag's setting and the flag itself are two items of one request, applied in order
    string_flag(api)
    green = [{"idx": 0, "value": "off"}, {"idx": 1, "value": "blue"}, {"value": "green"}]
    both = propose(
        api,
        team.editor,
        changes=[
            {"flag": "banner", "flagPatch": {"variations": green, "clientSide": False}},
            {"flag": "banner", "settings": {"fallthrough": {"variation": 2}}},
        ],
    )
    apply_approved(team, both["id"])
    served = api.get("/flags/banner/environments/production").json()
    assert served["fallthrough"] == {"variation": 2}
    assert api.get("/flags/banner").json()["clientSide"] is False
    assert api.get("/change-requests?status=open").json()["count"] == 0
