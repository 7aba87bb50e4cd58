"""A change request's life reaches a real webhook receiver (issue #34): created, rejected,
approved and applied, each naming the people, and the kill switch in a protected environment
delivered as an emergency change."""

from __future__ import annotations

from typing import Any

from tests.changes.conftest import Team, propose
from tests.webhooks.conftest import eventually
from tests.webhooks.receiver import receiving

SECRET = "whsec_teams_0123456789abcdef"
SETTINGS = "/flags/checkout/environments/production"
EVENTS = [
    "change_request.created",
    "change_request.approved",
    "change_request.rejected",
    "change_request.applied",
    "flag.toggled",
]


def test_a_receiver_gets_the_change_requests_and_the_emergency_turn_off(fast_team: Team) -> None:
    api = fast_team.api
    editor, reviewer = "key 'ci-editor'", "key 'reviewer-admin'"
    with receiving(SECRET) as receiver:
        hook = api.post("/webhooks", {"url": receiver.url, "events": EVENTS, "secret": SECRET})
        assert hook.status_code == 201, hook.text

        refused = propose(api, fast_team.editor, title="Everyone at once")["id"]
        rejected = api.post(
            f"/change-requests/{refused}/reject", {"comment": "too fast"}, key=fast_team.admin
        )
        assert rejected.status_code == 200, rejected.text
        turn_on = [{"flag": "checkout", "settings": {"enabled": True}}]
        accepted = propose(api, fast_team.editor, title="Turn checkout on", changes=turn_on)["id"]
        approved = api.post(
            f"/change-requests/{accepted}/approve", {"comment": "lgtm"}, key=fast_team.admin
        )
        assert approved.status_code == 200, approved.text
        applied = api.post(f"/change-requests/{accepted}/apply", key=fast_team.editor)
        assert applied.status_code == 200, applied.text
        off = api.post(SETTINGS + "/toggle", {"enabled": False}, key=fast_team.oncall)
        assert off.status_code == 200, off.text

        wanted = sorted(
            [
                "change_request.created",
                "change_request.created",
                "change_request.rejected",
                "change_request.approved",
                "change_request.applied",
                "flag.toggled",
            ]
        )
        eventually(lambda: receiver.types() == wanted, what=f"{wanted} delivered")
        got = list(receiver.unique().values())

    def one(event_type: str, request_id: str | None = None) -> dict[str, Any]:
        (payload,) = [
            p["data"]
            for p in got
            if p["type"] == event_type
            and (request_id is None or p["data"]["resource"]["key"] == request_id)
        ]
        return payload  # type: ignore[no-any-return]

    for rid, title in ((refused, "Everyone at once"), (accepted, "Turn checkout on")):
        created = one("change_request.created", rid)
        assert created["resource"] == {"type": "change_request", "key": rid}
        assert created["environment"] == "production"
        assert created["actor"] == editor
        assert created["after"]["author"] == editor
        assert created["after"]["title"] == title
        assert created["after"]["status"] == "open"

    no = one("change_request.rejected")
    assert no["resource"]["key"] == refused
    assert no["actor"] == reviewer
    assert no["after"]["author"] == editor
    assert no["after"]["reviewer"] == reviewer
    assert no["after"]["comment"] == "too fast"
    assert no["after"]["status"] == "rejected"

    yes = one("change_request.approved")
    assert yes["resource"]["key"] == accepted
    assert yes["actor"] == reviewer
    assert yes["after"]["author"] == editor
    assert yes["after"]["reviewer"] == reviewer
    assert yes["after"]["approvals"] == 1
    assert yes["after"]["requiredApprovals"] == 1

    done = one("change_request.applied")
    assert done["resource"]["key"] == accepted
    assert done["actor"] == editor
    assert done["after"]["status"] == "applied"
    assert done["after"]["appliedBy"] == editor
    assert done["after"]["changeRequest"] == {
        "id": accepted,
        "title": "Turn checkout on",
        "author": editor,
        "approvers": [reviewer],
    }

    emergency = one("flag.toggled")
    assert emergency["resource"] == {"type": "flag", "key": "checkout"}
    assert emergency["environment"] == "production"
    assert emergency["actor"] == "key 'oncall-bot'"
    assert emergency["after"] == {"enabled": False, "emergency": True}
