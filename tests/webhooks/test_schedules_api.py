"""Scheduled changes over HTTP on SQLite and PostgreSQL: a toggle and a rollout step carried out
through the flag service (audited, served), a cancel, a failure recorded once with its reason,
and bad input named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Api
from tests.webhooks.conftest import eventually

SCHEDULE = "/flags/checkout/environments/production/schedule"


def soon(seconds: float = 1.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def schedules(api: Api, status: str | None = None) -> list[dict[str, Any]]:
    response = api.get(SCHEDULE, params={"status": status} if status else None)
    assert response.status_code == 200, response.text
    return response.json()["schedules"]  # type: ignore[no-any-return]


@pytest.fixture
def flag(hooks_api: Api) -> Api:
    assert hooks_api.post("/flags", {"key": "checkout"}).status_code == 201
    return hooks_api


def test_a_scheduled_toggle_is_carried_out_once_and_audited(flag: Api) -> None:
    api = flag
    created = api.post(SCHEDULE, {"at": soon(), "enabled": True})
    assert created.status_code == 201, created.text
    change = created.json()
    assert change["status"] == "pending"
    assert change["kind"] == "toggle"
    assert change["enabled"] is True
    assert [s["id"] for s in schedules(api, "pending")] == [change["id"]]
    eventually(lambda: schedules(api)[0]["status"] == "done", what="toggle carried out")
    done = api.get(f"{SCHEDULE}/{change['id']}").json()
    assert done["finishedAt"] is not None
    assert "on" in done["reason"]
    settings = api.get("/flags/checkout/environments/production").json()
    assert settings["enabled"] is True
    entries = api.get("/flags/checkout/audit").json()["entries"]
    toggles = [e for e in entries if e["action"] == "flag.toggle"]
    assert len(toggles) == 1
    assert change["id"] in toggles[0]["actor"]
    assert any(e["action"] == "schedule.create" for e in entries)
    assert schedules(api, "pending") == []


def test_a_rollout_step_changes_the_fallthrough(flag: Api) -> None:
    api = flag
    step = {"rollout": [{"idx": 0, "weight": 75}, {"idx": 1, "weight": 25}], "bucketBy": "org"}
    created = api.post(SCHEDULE, {"at": soon(), "fallthrough": step})
    assert created.status_code == 201, created.text
    assert created.json()["fallthrough"] == step
    eventually(lambda: schedules(api)[0]["status"] == "done", what="rollout step carried out")
    fallthrough = api.get("/flags/checkout/environments/production").json()["fallthrough"]
    assert fallthrough["rollout"] == [{"idx": 0, "weight": 75}, {"idx": 1, "weight": 25}]
    assert fallthrough["bucketBy"] == "org"


def test_cancel_stops_it_and_only_a_pending_change_can_be_cancelled(flag: Api) -> None:
    api = flag
    later = api.post(SCHEDULE, {"at": soon(3600), "enabled": True}).json()
    cancelled = api.delete(f"{SCHEDULE}/{later['id']}")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    again = api.delete(f"{SCHEDULE}/{later['id']}")
    assert again.status_code == 409
    assert api.delete(f"{SCHEDULE}/sch_nope").status_code == 404
    # a cancelled change that falls due does nothing; a later one proves the runner looked
    first = api.post(SCHEDULE, {"at": soon(2), "enabled": True}).json()
    api.delete(f"{SCHEDULE}/{first['id']}")
    api.post(SCHEDULE, {"at": soon(3), "fallthrough": {"variation": 1}})
    eventually(lambda: len(schedules(api, "done")) == 1, what="the later change ran")
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is False
    assert {s["status"] for s in schedules(api)} == {"cancelled", "done"}
    actions = [e["action"] for e in api.get("/flags/checkout/audit").json()["entries"]]
    assert actions.count("schedule.cancel") == 2
    assert "flag.toggle" not in actions


def test_a_change_that_cannot_be_made_fails_once_with_its_reason(flag: Api) -> None:
    api = flag
    change = api.post(SCHEDULE, {"at": soon(3), "enabled": True}).json()
    assert api.post("/flags/checkout/archive").status_code == 200
    eventually(lambda: schedules(api)[0]["status"] == "failed", what="failure recorded")
    failed = schedules(api)[0]
    assert failed["id"] == change["id"]
    assert "archived" in failed["reason"]
    api.post("/flags/checkout/restore")
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is False
    actions = [e["action"] for e in api.get("/flags/checkout/audit").json()["entries"]]
    assert actions.count("schedule.fail") == 1
    assert "flag.toggle" not in actions


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"enabled": True}, "at"),
        ({"at": "tomorrow", "enabled": True}, "at"),
        ({"at": "2030-01-01T10:00:00", "enabled": True}, "at"),  # no offset
        ({"at": "2001-01-01T10:00:00Z", "enabled": True}, "at"),
        ({"at": "2030-01-01T10:00:00Z"}, "enabled"),
        (
            {"at": "2030-01-01T10:00:00Z", "enabled": True, "fallthrough": {"variation": 1}},
            "enabled",
        ),
        ({"at": "2030-01-01T10:00:00Z", "enabled": "yes"}, "enabled"),
        ({"at": "2030-01-01T10:00:00Z", "fallthrough": {"variation": 9}}, "fallthrough.variation"),
        (
            {"at": "2030-01-01T10:00:00Z", "fallthrough": {"rollout": [{"idx": 0, "weight": 60}]}},
            "fallthrough.rollout",
        ),
        ({"at": "2030-01-01T10:00:00Z", "enabled": True, "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_422_naming_the_field(flag: Api, body: dict[str, Any], field: str) -> None:
    response = flag.post(SCHEDULE, body)
    assert response.status_code == 422, response.text
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert any(f == field or f.startswith(field) for f in fields), fields
    assert schedules(flag) == []


def test_unknown_flag_or_environment_is_404(flag: Api) -> None:
    body = {"at": "2030-01-01T10:00:00Z", "enabled": True}
    assert flag.post("/flags/nope/environments/production/schedule", body).status_code == 404
    assert flag.post("/flags/checkout/environments/nope/schedule", body).status_code == 404
    assert flag.get("/flags/checkout/environments/nope/schedule").status_code == 404


def test_the_schedule_list_pages_like_every_list(flag: Api) -> None:
    """``limit`` and ``cursor`` page through every scheduled change once, in the order they were
    made; a cursor from another list is refused naming ``cursor``."""
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    made = [
        flag.post(SCHEDULE, {"at": later, "enabled": i % 2 == 0}).json()["id"] for i in range(5)
    ]
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 2}
    while True:
        page = flag.get(SCHEDULE, params=params).json()
        seen += [x["id"] for x in page["schedules"]]
        assert page["count"] == len(page["schedules"]) <= 2
        assert page["hasMore"] == (page["nextCursor"] is not None)
        if not page["hasMore"]:
            break
        params = {"limit": 2, "cursor": page["nextCursor"]}
    assert seen == made
    for _ in range(2):
        assert flag.post("/flags", {"key": f"another-{_}"}).status_code == 201
    from_flags = flag.get("/flags", params={"limit": 1}).json()["nextCursor"]
    refused = flag.get(SCHEDULE, params={"cursor": from_flags})
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["field"] == "cursor"
