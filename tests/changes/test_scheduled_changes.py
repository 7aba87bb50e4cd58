"""Scheduled changes in a protected environment, driven by the app's own runners (polling every
0.1 s): a request's applyAt runs only once approved, else it is recorded as not applied; a
schedule made before the environment was protected is refused when due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.changes.conftest import ROLLOUT, Team, propose, protect, team_of
from tests.conftest import Api
from tests.webhooks.conftest import eventually, hooks_app

SETTINGS = "/flags/checkout/environments/production"


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def request(api: Api, rid: str) -> dict[str, Any]:
    found = api.get(f"/change-requests/{rid}")
    assert found.status_code == 200, found.text
    return found.json()  # type: ignore[no-any-return]


def test_an_unapproved_scheduled_request_does_not_run(fast_team: Team) -> None:
    api = fast_team.api
    unapproved = propose(api, fast_team.editor, applyAt=soon(1))["id"]
    approved = propose(
        api,
        fast_team.editor,
        title="turn it on later",
        applyAt=soon(1.5),
        changes=[{"flag": "checkout", "settings": {"enabled": True}}],
    )["id"]
    assert (
        api.post(f"/change-requests/{approved}/approve", {}, key=fast_team.admin).status_code == 200
    )
    eventually(lambda: request(api, approved)["status"] == "applied", what="approved one applied")
    eventually(lambda: request(api, unapproved)["applyAt"] is None, what="unapproved one passed")
    skipped = request(api, unapproved)
    assert skipped["status"] == "open"
    assert "not applied at" in skipped["reason"]
    assert "0 approval" in skipped["reason"]
    live = api.get(SETTINGS).json()
    assert live["enabled"] is True
    assert live["fallthrough"] == {"variation": 0}  # the unapproved rollout never landed
    entries = api.get("/audit").json()["entries"]
    (applied,) = [e for e in entries if e["action"] == "change_request.apply"]
    assert applied["after"]["changeRequest"]["approvers"] == ["key 'reviewer-admin'"]
    assert any(e["action"] == "change_request.skip" for e in entries)
    # once approved, it is applied by hand (or given a new applyAt by its author)
    assert (
        api.post(f"/change-requests/{unapproved}/approve", {}, key=fast_team.admin).status_code
        == 200
    )
    done = api.post(f"/change-requests/{unapproved}/apply", key=fast_team.admin)
    assert done.status_code == 409  # the other request moved the setting underneath it
    assert done.json()["error"]["code"] == "base_moved"


@pytest.fixture
def unprotected_team(database_url: str) -> Any:
    with hooks_app(database_url) as api:
        yield team_of(api)


def test_a_schedule_made_before_protection_is_refused_when_due(unprotected_team: Team) -> None:
    api = unprotected_team.api
    path = SETTINGS + "/schedule"
    made = api.post(path, {"at": soon(1.5), "fallthrough": ROLLOUT})
    assert made.status_code == 201, made.text
    protect(api)
    eventually(lambda: api.get(path).json()["schedules"][0]["status"] == "failed", what="refused")
    (failed,) = api.get(path).json()["schedules"]
    assert "approval" in failed["reason"]
    assert "/api/v1/change-requests" in failed["reason"]
    assert api.get(SETTINGS).json()["fallthrough"] == {"variation": 0}
    refused = api.post(path, {"at": soon(60), "enabled": True})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "approval_required"
