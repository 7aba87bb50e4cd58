"""A flag's prerequisites in a protected environment change by change request (issue #34), over
HTTP on SQLite and PostgreSQL: the direct write answers 409 ``approval_required`` pointing to the
change requests, for every role; a request carrying the prerequisite is reviewed, applied, served
and audited with the request; a bad prerequisite is named when proposed."""

from __future__ import annotations

from tests.changes.conftest import Team, apply_approved, propose

SETTINGS = "/flags/checkout/environments/production"
PREREQUISITE = [{"key": "login", "variation": 1}]


def test_prerequisites_change_only_by_an_approved_request(team: Team) -> None:
    api = team.api
    assert api.post("/flags", {"key": "login"}).status_code == 201
    for key in (api.key, team.admin, team.editor, team.oncall):
        refused = api.put(SETTINGS, {"prerequisites": PREREQUISITE}, key=key)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "approval_required"
        assert "/api/v1/change-requests" in error["message"]
        assert error["details"] == [{"field": "environment", "message": "production"}]
    assert api.put(SETTINGS, {"prerequisites": PREREQUISITE}, key=team.viewer).status_code == 403
    assert api.get(SETTINGS).json()["prerequisites"] == []

    bad = api.post(
        "/change-requests",
        {
            "environment": "production",
            "title": "Needs a ghost",
            "changes": [
                {
                    "flag": "checkout",
                    "settings": {"prerequisites": [{"key": "ghost", "variation": 0}]},
                }
            ],
        },
        key=team.editor,
    )
    assert bad.status_code == 422, bad.text
    assert "changes[0].prerequisites[0].key" in [d["field"] for d in bad.json()["error"]["details"]]

    request = propose(
        api,
        team.editor,
        title="Checkout only after login",
        changes=[{"flag": "checkout", "settings": {"prerequisites": PREREQUISITE}}],
    )
    (diff,) = request["changes"][0]["diff"]
    assert diff == {
        "field": "prerequisites",
        "before": [],
        "after": PREREQUISITE,
        "changed": True,
    }
    unapproved = api.post(f"/change-requests/{request['id']}/apply", key=team.editor)
    assert unapproved.status_code == 409
    assert unapproved.json()["error"]["code"] == "approvals_missing"
    assert api.get(SETTINGS).json()["prerequisites"] == []

    applied = apply_approved(team, request["id"])
    assert applied["status"] == "applied"
    assert api.get(SETTINGS).json()["prerequisites"] == PREREQUISITE
    entries = api.get("/flags/checkout/audit").json()["entries"]
    (entry,) = [e for e in entries if e["action"] == "flag.settings.update"]
    assert entry["environment"] == "production"
    assert entry["after"]["prerequisites"] == PREREQUISITE
    assert entry["after"]["changeRequest"]["approvers"] == ["key 'reviewer-admin'"]
