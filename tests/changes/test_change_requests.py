"""Change requests over HTTP, on SQLite and PostgreSQL: four eyes on a protected environment
(issue #34), the identity rule, approvals lapsing with an edit, no silent overwrite, the gate on
direct writes for every role, and the kill switch that is never gated."""

from __future__ import annotations

from typing import Any

from tests.changes.conftest import ROLLOUT, Team, new_key, propose
from tests.conftest import Api
from tests.control_plane.people import PASSWORD, console_token, person, sign_in_form

SETTINGS = "/flags/checkout/environments/production"


def audit(api: Api, path: str) -> list[dict[str, Any]]:
    found = api.get(path)
    assert found.status_code == 200, found.text
    return found.json()["entries"]  # type: ignore[no-any-return]


def test_required_approvals_is_an_admin_setting_of_an_environment(api: Api) -> None:
    assert api.get("/environments/production").json()["requiredApprovals"] == 0
    assert api.patch("/environments/production", {"requiredApprovals": 2}).status_code == 200
    assert api.get("/environments/production").json()["requiredApprovals"] == 2
    for bad in (6, -1, "1", True, None):
        refused = api.patch("/environments/production", {"requiredApprovals": bad})
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"]["details"][0]["field"] == "requiredApprovals"
    made = api.post("/environments", {"key": "eu", "requiredApprovals": 3})
    assert made.status_code == 201, made.text
    assert made.json()["requiredApprovals"] == 3
    assert api.post("/environments", {"key": "us", "requiredApprovals": 9}).status_code == 422
    editor = new_key(api, "editor", "ci")
    refused = api.patch("/environments/production", {"requiredApprovals": 0}, key=editor)
    assert refused.status_code == 403
    assert refused.json()["error"]["details"] == [{"field": "permission", "message": "admin"}]
    updates = [e for e in audit(api, "/audit") if e["action"] == "environment.update"]
    assert updates[0]["after"]["requiredApprovals"] == 2


def test_an_editor_proposes_an_admin_approves_and_it_is_applied(team: Team) -> None:
    api = team.api
    request = propose(api, team.editor, description="canary went well")
    assert request["status"] == "open"
    assert request["author"] == "key 'ci-editor'"
    assert request["requiredApprovals"] == 1
    assert request["approvals"] == 0
    (change,) = request["changes"]
    assert change["baseVersion"] == change["liveVersion"]
    assert change["moved"] == []
    (diff,) = change["diff"]
    assert diff["field"] == "fallthrough"
    assert diff["changed"] is True
    assert diff["before"] == {"variation": 0}
    assert diff["after"] == ROLLOUT
    rid = request["id"]

    # nobody approves their own request: the same key, asked again, is still its author
    for _ in range(2):
        own = api.post(f"/change-requests/{rid}/approve", {}, key=team.editor)
        assert own.status_code == 403, own.text
        assert own.json()["error"]["code"] == "own_change_request"
        assert "someone else" in own.json()["error"]["message"]
    own_reject = api.post(f"/change-requests/{rid}/reject", {"comment": "no"}, key=team.editor)
    assert own_reject.status_code == 403
    viewer = api.post(f"/change-requests/{rid}/approve", {}, key=team.viewer)
    assert viewer.status_code == 403
    assert viewer.json()["error"]["details"][0]["message"] == "edit"

    early = api.post(f"/change-requests/{rid}/apply", key=team.editor)
    assert early.status_code == 409
    assert early.json()["error"]["code"] == "approvals_missing"

    approved = api.post(f"/change-requests/{rid}/approve", {"comment": "lgtm"}, key=team.admin)
    assert approved.status_code == 200, approved.text
    assert approved.json()["approvals"] == 1
    assert approved.json()["approvedBy"] == ["key 'reviewer-admin'"]
    twice = api.post(f"/change-requests/{rid}/approve", {}, key=team.admin)
    assert twice.status_code == 409

    applied = api.post(f"/change-requests/{rid}/apply", key=team.editor)
    assert applied.status_code == 200, applied.text
    assert applied.json()["status"] == "applied"
    assert applied.json()["appliedBy"] == "key 'ci-editor'"
    live = api.get(SETTINGS).json()
    assert live["fallthrough"] == ROLLOUT
    again = api.post(f"/change-requests/{rid}/apply", key=team.editor)
    assert again.status_code == 409

    entries = audit(api, "/audit")
    (applied_entry,) = [e for e in entries if e["action"] == "change_request.apply"]
    assert applied_entry["after"]["author"] == "key 'ci-editor'"
    assert applied_entry["after"]["changeRequest"]["approvers"] == ["key 'reviewer-admin'"]
    (setting_entry,) = [
        e for e in audit(api, "/flags/checkout/audit") if e["action"] == "flag.settings.update"
    ]
    assert setting_entry["environment"] == "production"
    assert setting_entry["after"]["changeRequest"] == {
        "id": rid,
        "title": "Roll checkout out to a quarter",
        "author": "key 'ci-editor'",
        "approvers": ["key 'reviewer-admin'"],
    }
    actions = {e["action"] for e in entries}
    assert {"change_request.create", "change_request.approve"} <= actions


def test_an_edit_after_an_approval_needs_a_new_approval(team: Team) -> None:
    api = team.api
    rid = propose(api, team.editor)["id"]
    assert api.post(f"/change-requests/{rid}/approve", {}, key=team.admin).status_code == 200
    other = api.patch(f"/change-requests/{rid}", {"title": "mine now"}, key=team.admin)
    assert other.status_code == 403
    assert other.json()["error"]["code"] == "not_the_author"
    edited = api.patch(
        f"/change-requests/{rid}",
        {"changes": [{"flag": "checkout", "settings": {"fallthrough": {"variation": 1}}}]},
        key=team.editor,
    )
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert body["version"] == 2
    assert body["approvals"] == 0
    assert [r["current"] for r in body["reviews"]] == [False]
    refused = api.post(f"/change-requests/{rid}/apply", key=team.editor)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "approvals_missing"
    assert api.post(f"/change-requests/{rid}/approve", {}, key=team.admin).status_code == 200
    assert api.post(f"/change-requests/{rid}/apply", key=team.editor).status_code == 200
    assert api.get(SETTINGS).json()["fallthrough"] == {"variation": 1}


def test_a_request_whose_flag_moved_underneath_refuses_naming_what_moved(team: Team) -> None:
    api = team.api
    first = propose(api, team.editor)["id"]
    second = propose(
        api,
        team.editor,
        title="Turn it on",
        changes=[
            {"flag": "checkout", "settings": {"enabled": True, "fallthrough": {"variation": 1}}}
        ],
    )["id"]
    for rid in (first, second):
        assert api.post(f"/change-requests/{rid}/approve", {}, key=team.admin).status_code == 200
    assert api.post(f"/change-requests/{first}/apply", key=team.oncall).status_code == 200
    refused = api.post(f"/change-requests/{second}/apply", key=team.admin)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "base_moved"
    assert error["details"] == [
        {
            "field": "checkout.fallthrough",
            "message": f'live {_json(ROLLOUT)}, base {{"variation":0}}',
        }
    ]
    assert "checkout fallthrough" in error["message"]
    shown = api.get(f"/change-requests/{second}").json()["changes"][0]["moved"]
    assert shown == [
        {"flag": "checkout", "field": "fallthrough", "base": {"variation": 0}, "live": ROLLOUT}
    ]
    assert api.get(SETTINGS).json()["enabled"] is False  # nothing of it was applied
    # the author bases it anew on what is live; after a new approval it applies
    rebased = api.patch(
        f"/change-requests/{second}",
        {"changes": [{"flag": "checkout", "settings": {"enabled": True}}]},
        key=team.editor,
    )
    assert rebased.status_code == 200
    assert rebased.json()["changes"][0]["moved"] == []
    assert api.post(f"/change-requests/{second}/approve", {}, key=team.admin).status_code == 200
    assert api.post(f"/change-requests/{second}/apply", key=team.admin).status_code == 200
    live = api.get(SETTINGS).json()
    assert live["enabled"] is True
    assert live["fallthrough"] == ROLLOUT


def _json(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))


def test_direct_writes_in_a_protected_environment_answer_409_for_every_role(team: Team) -> None:
    api = team.api
    assert api.post("/segments", {"key": "beta", "included": ["u1"]}).status_code == 201
    rules = {"rules": [{"clauses": [{"segment": "beta", "op": "segmentMatch"}], "variation": 1}]}
    assert api.put("/flags/checkout/environments/staging/rules", rules).status_code == 200
    writes = [
        ("PUT", SETTINGS, {"fallthrough": {"variation": 1}}),
        ("PUT", SETTINGS, {"targets": [{"variation": 1, "values": ["u1"]}]}),
        ("PUT", SETTINGS + "/rules", rules),
        ("POST", SETTINGS + "/toggle", {"enabled": True}),
        ("POST", SETTINGS + "/schedule", {"at": "2031-01-01T00:00:00Z", "enabled": True}),
    ]
    for key in (api.key, team.admin, team.editor, team.oncall):
        for method, path, body in writes:
            refused = api.request(method, path, json=body, key=key)
            assert refused.status_code == 409, (method, path, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "approval_required"
            assert "/api/v1/change-requests" in error["message"]
    # permission first: a viewer lacks edit whatever the environment
    for method, path, body in writes:
        refused = api.request(method, path, json=body, key=team.viewer)
        assert refused.status_code == 403, refused.text
    # where no approval is required, the same writes go through
    assert api.put("/flags/checkout/environments/staging", {"enabled": True}).status_code == 200
    # a segment that a production flag uses: once production's flag uses it, it is guarded too
    assert api.patch("/segments/beta", {"included": ["u2"]}).status_code == 200
    rid = propose(api, team.editor, changes=[{"flag": "checkout", "rules": rules["rules"]}])["id"]
    assert api.post(f"/change-requests/{rid}/approve", {}, key=team.admin).status_code == 200
    assert api.post(f"/change-requests/{rid}/apply", key=team.editor).status_code == 200
    guarded = api.patch("/segments/beta", {"included": ["u3"]}, key=team.admin)
    assert guarded.status_code == 409
    assert guarded.json()["error"]["code"] == "approval_required"
    assert api.delete("/segments/beta").json()["error"]["code"] == "approval_required"
    assert api.get(SETTINGS).json()["enabled"] is False
    assert len(api.get(SETTINGS + "/rules").json()["rules"]) == 1


def test_the_kill_switch_is_never_gated(team: Team) -> None:
    api = team.api
    rid = propose(api, team.editor, changes=[{"flag": "checkout", "settings": {"enabled": True}}])[
        "id"
    ]
    assert api.post(f"/change-requests/{rid}/approve", {}, key=team.admin).status_code == 200
    assert api.post(f"/change-requests/{rid}/apply", key=team.editor).status_code == 200
    assert api.get(SETTINGS).json()["enabled"] is True

    pending = propose(api, team.editor, title="later")["id"]
    assert api.post(f"/change-requests/{pending}/approve", {}, key=team.admin).status_code == 200
    lacking = api.post(SETTINGS + "/toggle", {"enabled": False}, key=team.editor)
    assert lacking.status_code == 403
    assert lacking.json()["error"]["details"] == [{"field": "permission", "message": "turn-off"}]
    off = api.post(SETTINGS + "/toggle", {"enabled": False}, key=team.oncall)
    assert off.status_code == 200, off.text
    assert off.json()["enabled"] is False
    assert api.get(SETTINGS).json()["enabled"] is False
    toggles = [e for e in audit(api, "/flags/checkout/audit") if e["action"] == "flag.toggle"]
    assert toggles[0]["after"] == {"enabled": False, "emergency": True}
    assert toggles[0]["actor"] == "key 'oncall-bot'"
    on = api.post(SETTINGS + "/toggle", {"enabled": True}, key=team.oncall)
    assert on.status_code == 409
    assert on.json()["error"]["code"] == "approval_required"
    # the emergency moved the setting: a request based on it before refuses to apply
    moved = api.post(f"/change-requests/{pending}/apply", key=team.admin)
    assert moved.status_code == 409
    assert moved.json()["error"]["details"][0]["field"] == "checkout.enabled"


def test_bad_requests_name_the_field(team: Team) -> None:
    api = team.api
    cases: list[tuple[dict[str, Any], str]] = [
        ({"environment": "production", "title": " ", "changes": []}, "title"),
        ({"environment": "production", "title": "t", "changes": []}, "changes"),
        (
            {
                "environment": "production",
                "title": "t",
                "changes": [{"flag": "nope", "settings": {"enabled": True}}],
            },
            "changes[0].flag",
        ),
        (
            {"environment": "production", "title": "t", "changes": [{"flag": "checkout"}]},
            "changes[0]",
        ),
        (
            {
                "environment": "production",
                "title": "t",
                "changes": [{"flag": "checkout", "settings": {}}],
            },
            "changes[0].settings",
        ),
        (
            {
                "environment": "production",
                "title": "t",
                "changes": [{"flag": "checkout", "settings": {"offVariation": 7}}],
            },
            "changes[0].offVariation",
        ),
        (
            {
                "environment": "production",
                "title": "t",
                "changes": [{"flag": "checkout", "rules": [{"clauses": [], "variation": 9}]}],
            },
            "changes[0].rules[0].clauses",
        ),
        (
            {
                "environment": "production",
                "title": "t",
                "applyAt": "2001-01-01T00:00:00Z",
                "changes": [{"flag": "checkout", "settings": {"enabled": True}}],
            },
            "applyAt",
        ),
        (
            {
                "environment": "production",
                "title": "t",
                "changes": [{"flag": "checkout", "settings": {"enabled": "yes"}}],
            },
            "changes[0].settings.enabled",
        ),
    ]
    for body, field in cases:
        refused = api.post("/change-requests", body, key=team.editor)
        assert refused.status_code == 422, (body, refused.text)
        fields = [d["field"] for d in refused.json()["error"]["details"]]
        assert field in fields, (field, fields)
    assert api.get("/change-requests").json()["changeRequests"] == []
    rid = propose(api, team.editor)["id"]
    blank = api.post(f"/change-requests/{rid}/reject", {"comment": " "}, key=team.admin)
    assert blank.status_code == 422
    assert blank.json()["error"]["details"][0]["field"] == "comment"
    assert api.get("/change-requests/chr_nope").status_code == 404


def test_reject_close_and_the_list(team: Team) -> None:
    api = team.api
    first = propose(api, team.editor)["id"]
    second = propose(api, team.editor, title="second")["id"]
    rejected = api.post(f"/change-requests/{first}/reject", {"comment": "too fast"}, key=team.admin)
    assert rejected.status_code == 200
    assert rejected.json()["status"] == "rejected"
    assert api.post(f"/change-requests/{first}/approve", {}, key=team.oncall).status_code == 409
    closing = api.post(f"/change-requests/{second}/close", key=team.oncall)
    assert closing.status_code == 403  # neither its author nor an admin
    assert (
        api.post(f"/change-requests/{second}/close", key=team.editor).json()["status"] == "closed"
    )
    listed = api.get("/change-requests", params={"status": "rejected"}).json()["changeRequests"]
    assert [r["id"] for r in listed] == [first]
    everything = api.get("/change-requests").json()["changeRequests"]
    assert [r["id"] for r in everything] == [second, first]
    reopened = api.patch(f"/change-requests/{first}", {"title": "slower"}, key=team.editor)
    assert reopened.json()["status"] == "open"
    assert api.get("/change-requests", params={"status": "bogus"}).status_code == 422


def test_a_person_cannot_approve_their_own_request_through_another_token(team: Team) -> None:
    api = team.api
    first = person(api, "ed@example.com", "editor")
    second = api.post("/tokens", {"name": "laptop"}, key=first)
    assert second.status_code == 201, second.text
    other_token = second.json()["token"]
    rid = propose(api, first)["id"]
    assert api.get(f"/change-requests/{rid}").json()["author"] == "ed@example.com"
    for token in (first, other_token):
        own = api.post(f"/change-requests/{rid}/approve", {}, key=token)
        assert own.status_code == 403, own.text
        assert own.json()["error"]["code"] == "own_change_request"
    # the author's other token is still the author: it may edit the request
    edited = api.patch(f"/change-requests/{rid}", {"title": "quarter, then half"}, key=other_token)
    assert edited.status_code == 200, edited.text
    reviewer = person(api, "ada@example.com", "admin")
    assert api.post(f"/change-requests/{rid}/approve", {}, key=reviewer).status_code == 200
    assert api.post(f"/change-requests/{rid}/apply", key=reviewer).status_code == 200
    (entry,) = [e for e in audit(api, "/audit") if e["action"] == "change_request.apply"]
    assert entry["actor"] == "ada@example.com"
    assert entry["after"]["changeRequest"]["author"] == "ed@example.com"
    assert entry["after"]["changeRequest"]["approvers"] == ["ada@example.com"]


def test_a_token_turns_off_only_with_a_grant_it_was_made_with_and_its_person_holds(
    team: Team,
) -> None:
    """Audit of #34: a personal token capped to viewer kept its person's "may turn off" (and
    an admin's implied one), so a read-only token could turn flags off in production. A token
    holds at most what it was made with and at most what its person holds now."""
    api = team.api
    off = {"enabled": False}
    admin = person(api, "root@example.com", "admin")
    oncall = person(api, "otto@example.com", "editor")
    otto = next(p for p in api.get("/users").json()["people"] if p["email"] == "otto@example.com")
    assert api.patch(f"/users/{otto['id']}", {"mayTurnOff": True}).status_code == 200
    for who in (admin, oncall):
        made = api.post("/tokens", {"name": "dashboard", "role": "viewer"}, key=who)
        assert made.status_code == 201, made.text
        assert made.json()["mayTurnOff"] is False
        refused = api.post(SETTINGS + "/toggle", off, key=made.json()["token"])
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["details"] == [
            {"field": "permission", "message": "turn-off"}
        ]
    # Otto's first token was made before his grant: it holds none, nor do tokens it makes
    assert api.post(SETTINGS + "/toggle", off, key=oncall).status_code == 403
    assert api.post("/tokens", {"name": "x", "mayTurnOff": True}, key=oncall).status_code == 422
    # with the person's role, a token made in the console takes their grant by default
    assert sign_in_form(api, "otto@example.com", PASSWORD).status_code == 303  # type: ignore[attr-defined]
    pager = console_token(api, "pager")
    assert api.post(SETTINGS + "/toggle", off, key=pager).status_code == 200
    # a grant may be asked for explicitly, but never one the person lacks
    asked = api.post(
        "/tokens", {"name": "ro pager", "role": "viewer", "mayTurnOff": True}, key=admin
    )
    assert asked.status_code == 201, asked.text
    assert api.post(SETTINGS + "/toggle", off, key=asked.json()["token"]).status_code == 200
    plain = person(api, "ed@example.com", "editor")
    beyond = api.post("/tokens", {"name": "x", "mayTurnOff": True}, key=plain)
    assert beyond.status_code == 422, beyond.text
    assert beyond.json()["error"]["details"][0]["field"] == "mayTurnOff"
    listed = api.get("/tokens", key=oncall).json()["tokens"]
    assert {(t["name"], t["role"], t["mayTurnOff"]) for t in listed} >= {
        ("dashboard", "viewer", False),
        ("pager", "editor", True),
    }
    # revoking the person's grant stops the token's at its next request
    assert api.patch(f"/users/{otto['id']}", {"mayTurnOff": False}).status_code == 200
    stopped = api.post(SETTINGS + "/toggle", off, key=pager)
    assert stopped.status_code == 403, stopped.text
    assert stopped.json()["error"]["details"] == [{"field": "permission", "message": "turn-off"}]


def test_a_key_someone_mints_is_still_them_when_approving(team: Team) -> None:
    """Audit of #34: a management key carried no record of who made it, so an admin could
    propose a change, mint a key and approve their own request with it. A key made by a person
    (or by a key of theirs, however far down) is that person when it reviews."""
    api = team.api
    ann = person(api, "ann@example.com", "admin")
    rid = propose(api, ann)["id"]
    minted = api.post("/keys", {"kind": "management", "name": "ann-bot"}, key=ann)
    assert minted.status_code == 201, minted.text
    bot = minted.json()["key"]
    grandchild = api.post("/keys", {"kind": "management", "name": "ann-bot-2"}, key=bot)
    assert grandchild.status_code == 201, grandchild.text
    for key in (bot, grandchild.json()["key"]):
        own = api.post(f"/change-requests/{rid}/approve", {}, key=key)
        assert own.status_code == 403, own.text
        assert own.json()["error"]["code"] == "own_change_request"
        assert own.json()["error"]["details"] == [{"field": "author", "message": "ann@example.com"}]
    # the key is still named by its name where people are named
    assert api.post("/flags", {"key": "by-bot"}, key=bot).status_code == 201
    [entry] = audit(api, "/flags/by-bot/audit")
    assert entry["actor"] == "key 'ann-bot'"
    # the author's key may edit the request as the author may
    edited = api.patch(f"/change-requests/{rid}", {"title": "a quarter, by Ann"}, key=bot)
    assert edited.status_code == 200, edited.text
    assert edited.json()["author"] == "ann@example.com"
    # someone else's approval counts
    bea = person(api, "bea@example.com", "admin")
    approved = api.post(f"/change-requests/{rid}/approve", {}, key=bea)
    assert approved.status_code == 200, approved.text
    assert approved.json()["approvedBy"] == ["bea@example.com"]
