"""A segment a protected environment's flag uses changes by change request (issue #34), over
HTTP on SQLite and PostgreSQL: the direct write is refused, the request's item names the segment
and carries the body of ``PATCH /segments/{key}``, it is reviewed, applied through the segments'
own service and audited with the request; what moved underneath is named; bad items name their
field; a request of an unprotected environment still needs production's approvals."""

from __future__ import annotations

from typing import Any

from tests.changes.conftest import Team, apply_approved, propose
from tests.conftest import Api

USES_VIPS = [{"clauses": [{"segment": "vips", "op": "segmentMatch"}], "variation": 1}]


def vips_in_production(team: Team) -> None:
    """Segment ``vips``, used by production's ``checkout`` (its rule set by a request)."""
    api = team.api
    made = api.post("/segments", {"key": "vips", "included": ["u1"]})
    assert made.status_code == 201, made.text
    rid = propose(api, team.editor, changes=[{"flag": "checkout", "rules": USES_VIPS}])["id"]
    apply_approved(team, rid)


def propose_segment(team: Team, patch: dict[str, Any], **body: Any) -> dict[str, Any]:
    return propose(
        team.api,
        team.editor,
        title="More VIPs",
        changes=[{"segment": "vips", "patch": patch}],
        **body,
    )


def test_a_segment_production_uses_changes_by_an_approved_request(team: Team) -> None:
    api = team.api
    vips_in_production(team)
    direct = api.patch("/segments/vips", {"included": ["u1", "u2"]}, key=team.admin)
    assert direct.status_code == 409, direct.text
    assert direct.json()["error"]["code"] == "approval_required"

    request = propose_segment(team, {"included": ["u1", "u2"], "description": "top spenders"})
    assert request["requiredApprovals"] == 1
    (change,) = request["changes"]
    assert change["segment"] == "vips"
    assert change["flag"] is None
    assert change["patch"] == {"included": ["u1", "u2"], "description": "top spenders"}
    assert change["baseVersion"] == change["liveVersion"] == 1
    assert change["moved"] == []
    diff = {d["field"]: d for d in change["diff"]}
    assert diff["included"] == {
        "field": "included",
        "before": ["u1"],
        "after": ["u1", "u2"],
        "changed": True,
    }
    assert diff["description"]["before"] == ""
    # reading it back shows the same diff against live; the segment has not changed yet
    assert api.get(f"/change-requests/{request['id']}").json()["changes"] == request["changes"]
    assert api.get("/segments/vips").json()["included"] == ["u1"]

    early = api.post(f"/change-requests/{request['id']}/apply", key=team.editor)
    assert early.status_code == 409
    assert early.json()["error"]["code"] == "approvals_missing"
    applied = apply_approved(team, request["id"])
    assert applied["status"] == "applied"
    (done,) = applied["changes"]
    assert {d["field"]: d["before"] for d in done["diff"]}["included"] == ["u1"]  # what it replaced
    live = api.get("/segments/vips").json()
    assert live["included"] == ["u1", "u2"]
    assert live["description"] == "top spenders"
    assert live["version"] == 2

    history = api.get("/segments/vips/audit").json()["entries"]
    (update,) = [e for e in history if e["action"] == "segment.update"]
    assert update["after"]["changeRequest"] == {
        "id": request["id"],
        "title": "More VIPs",
        "author": "key 'ci-editor'",
        "approvers": ["key 'reviewer-admin'"],
    }
    entries = api.get("/audit").json()["entries"]
    (apply_entry,) = [
        e
        for e in entries
        if e["action"] == "change_request.apply" and e["resourceKey"] == request["id"]
    ]
    assert apply_entry["after"]["segments"] == ["vips"]
    assert apply_entry["after"]["flags"] == []
    # still guarded afterwards
    assert api.patch("/segments/vips", {"included": []}).status_code == 409


def test_a_segment_that_moved_since_the_request_is_not_applied(team: Team) -> None:
    api = team.api
    vips_in_production(team)
    first = propose_segment(team, {"included": ["u1", "u2"]})
    second = propose_segment(team, {"excluded": ["u9"]})
    apply_approved(team, first["id"])

    shown = api.get(f"/change-requests/{second['id']}").json()
    (change,) = shown["changes"]
    assert change["baseVersion"] == 1
    assert change["liveVersion"] == 2
    assert change["moved"] == [
        {"field": "included", "base": ["u1"], "live": ["u1", "u2"], "segment": "vips"}
    ]
    assert (
        api.post(f"/change-requests/{second['id']}/approve", {}, key=team.admin).status_code == 200
    )
    refused = api.post(f"/change-requests/{second['id']}/apply", key=team.editor)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "base_moved"
    assert "segment:vips included" in error["message"]
    assert error["details"][0]["field"] == "segment:vips.included"
    assert api.get("/segments/vips").json()["excluded"] == []

    # its author bases it on what is live now; approved again, it applies
    edited = api.patch(
        f"/change-requests/{second['id']}",
        {"changes": [{"segment": "vips", "patch": {"excluded": ["u9"]}}]},
        key=team.editor,
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["changes"][0]["baseVersion"] == 2
    apply_approved(team, second["id"])
    live = api.get("/segments/vips").json()
    assert (live["included"], live["excluded"]) == (["u1", "u2"], ["u9"])


def refusal(api: Api, key: str, changes: list[dict[str, Any]]) -> list[dict[str, str]]:
    body = {"environment": "production", "title": "bad", "changes": changes}
    refused = api.post("/change-requests", body, key=key)
    assert refused.status_code == 422, (changes, refused.text)
    return refused.json()["error"]["details"]  # type: ignore[no-any-return]


def test_bad_segment_items_name_their_field(team: Team) -> None:
    api = team.api
    vips_in_production(team)
    patch = {"included": ["u2"]}
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([{"segment": "nobody", "patch": patch}], "changes[0].segment"),
        ([{"segment": "vips", "flag": "checkout", "patch": patch}], "changes[0].segment"),
        ([{"patch": patch}], "changes[0].flag"),
        (
            [{"segment": "vips", "patch": patch}, {"segment": "vips", "patch": patch}],
            "changes[1].segment",
        ),
        ([{"segment": "vips"}], "changes[0].patch"),
        ([{"segment": "vips", "patch": {}}], "changes[0].patch"),
        ([{"segment": "vips", "patch": patch, "rules": []}], "changes[0].rules"),
        ([{"flag": "checkout", "patch": patch}], "changes[0].patch"),
        # checked by the segments' own service in the dry run, the field named within the item
        (
            [{"segment": "vips", "patch": {"rules": [{"clauses": []}]}}],
            "changes[0].rules[0].clauses",
        ),
        ([{"segment": "vips", "patch": {"name": ""}}], "changes[0].name"),
    ]
    for changes, field in cases:
        details = refusal(api, team.editor, changes)
        assert field in [d["field"] for d in details], (changes, details)
    unknown = api.post(
        "/change-requests",
        {
            "environment": "production",
            "title": "bad",
            "changes": [{"segment": "vips", "patch": {"colour": "red"}}],
        },
        key=team.editor,
    )
    assert unknown.status_code in (400, 422), unknown.text
    assert "colour" in unknown.text
    # nothing was written by the dry runs
    assert api.get("/segments/vips").json()["version"] == 1


def test_a_request_of_an_unprotected_environment_needs_production_approvals(team: Team) -> None:
    api = team.api
    vips_in_production(team)
    request = propose_segment(team, {"included": ["u1", "u3"]}, environment="staging")
    assert request["environment"] == "staging"
    assert request["requiredApprovals"] == 1  # production's, where checkout uses vips
    refused = api.post(f"/change-requests/{request['id']}/apply", key=team.editor)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "approvals_missing"
    apply_approved(team, request["id"])
    assert api.get("/segments/vips").json()["included"] == ["u1", "u3"]


def test_a_request_carries_a_segments_lists_of_other_kinds(team: Team) -> None:
    """``includedContexts`` / ``excludedContexts`` of ``PATCH /segments/{key}`` pass through a
    request: diffed against live, applied by the segments' service, bad ones naming the field."""
    api = team.api
    vips_in_production(team)
    orgs = [{"contextKind": "org", "values": ["acme"]}]
    request = propose_segment(team, {"includedContexts": orgs, "excludedContexts": []})
    (change,) = request["changes"]
    assert change["patch"] == {"includedContexts": orgs, "excludedContexts": []}
    diff = {d["field"]: d for d in change["diff"]}
    assert diff["includedContexts"] == {
        "field": "includedContexts",
        "before": [],
        "after": orgs,
        "changed": True,
    }
    assert diff["excludedContexts"]["changed"] is False
    apply_approved(team, request["id"])
    live = api.get("/segments/vips").json()
    assert live["includedContexts"] == orgs
    assert live["version"] == 2
    details = refusal(
        api,
        team.editor,
        [
            {
                "segment": "vips",
                "patch": {"includedContexts": [{"contextKind": "multi", "values": []}]},
            }
        ],
    )
    assert "changes[0].includedContexts[0].contextKind" in [d["field"] for d in details]
