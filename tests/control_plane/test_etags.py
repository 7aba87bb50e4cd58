"""Optimistic concurrency: every resource answers with its version as ``ETag``; a write with a
stale ``If-Match`` is 412 with the current version and writes nothing; without ``If-Match``
writes go through as before."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.control_plane.test_flags import create


def tag(response: Any) -> str:
    return response.headers["ETag"]  # type: ignore[no-any-return]


def refused(response: Any, current: int) -> None:
    assert response.status_code == 412, response.text
    assert response.json()["error"]["currentVersion"] == current
    assert response.json()["error"]["details"][0]["field"] == "If-Match"
    assert tag(response) == f'"{current}"'


def test_flag_etags_and_if_match(api: Api) -> None:
    created = api.post("/flags", {"key": "nav"})
    assert tag(created) == '"1"'
    read = api.get("/flags/nav")
    assert tag(read) == '"1"'
    changed = api.patch("/flags/nav", {"name": "Nav"}, headers={"If-Match": tag(read)})
    assert changed.status_code == 200
    assert tag(changed) == '"2"'
    stale = api.patch("/flags/nav", {"name": "Lost"}, headers={"If-Match": '"1"'})
    refused(stale, 2)
    assert api.get("/flags/nav").json()["name"] == "Nav"
    refused(api.post("/flags/nav/archive", headers={"If-Match": '"1"'}), 2)
    assert api.get("/flags/nav").json()["archived"] is False
    # weak tags, lists of tags and * are understood; no If-Match writes as before
    assert api.patch("/flags/nav", {"name": "A"}, headers={"If-Match": 'W/"2"'}).status_code == 200
    assert (
        api.patch("/flags/nav", {"name": "B"}, headers={"If-Match": '"1", "3"'}).status_code == 200
    )
    assert api.patch("/flags/nav", {"name": "C"}, headers={"If-Match": "*"}).status_code == 200
    assert api.patch("/flags/nav", {"name": "D"}).status_code == 200
    refused(api.patch("/flags/nav", {"name": "E"}, headers={"If-Match": "garbage"}), 6)
    entries = api.get("/flags/nav/audit").json()["entries"]
    assert [e["after"]["name"] for e in entries if e["action"] == "flag.update"] == [
        "D",
        "C",
        "B",
        "A",
        "Nav",
    ]


def test_environment_settings_rules_and_toggle_use_the_settings_version(api: Api) -> None:
    create(api, {"key": "nav"})
    path = "/flags/nav/environments/production"
    settings = api.get(path)
    assert tag(settings) == f'"{settings.json()["version"]}"'
    version = settings.json()["version"]
    toggled = api.post(f"{path}/toggle", {"enabled": True}, headers={"If-Match": tag(settings)})
    assert toggled.status_code == 200
    assert tag(toggled) == f'"{version + 1}"'
    refused(
        api.post(f"{path}/toggle", {"enabled": False}, headers={"If-Match": tag(settings)}),
        version + 1,
    )
    assert api.get(path).json()["enabled"] is True
    rules = api.get(f"{path}/rules")
    assert tag(rules) == tag(toggled)
    body: dict[str, Any] = {
        "rules": [{"clauses": [{"attribute": "country", "op": "in", "values": ["NL"]}]}]
    }
    body["rules"][0]["variation"] = 0
    refused(api.put(f"{path}/rules", body, headers={"If-Match": f'"{version}"'}), version + 1)
    assert api.get(f"{path}/rules").json()["rules"] == []
    assert api.put(f"{path}/rules", body, headers={"If-Match": tag(rules)}).status_code == 200
    refused(api.put(path, {"enabled": False}, headers={"If-Match": tag(rules)}), version + 2)
    # the other environment has its own version
    assert api.get("/flags/nav/environments/staging").headers["ETag"] == f'"{version}"'


def test_segments_and_experiments_refuse_stale_writes(api: Api) -> None:
    segment = api.post("/segments", {"key": "beta", "included": ["u1"]})
    assert tag(segment) == '"1"'
    assert (
        api.patch("/segments/beta", {"name": "Beta"}, headers={"If-Match": '"1"'}).status_code
        == 200
    )
    refused(api.patch("/segments/beta", {"name": "Lost"}, headers={"If-Match": '"1"'}), 2)
    refused(api.delete("/segments/beta", headers={"If-Match": '"1"'}), 2)
    assert api.get("/segments/beta").json()["name"] == "Beta"

    experiment = api.post("/experiments", {"name": "Hero", "activate": False, "goal": "buy"})
    assert tag(experiment) == f'"{experiment.json()["version"]}"'
    key = experiment.json()["key"]
    started = api.post(
        f"/experiments/{key}", {"status": "running"}, headers={"If-Match": tag(experiment)}
    )
    assert started.status_code == 200
    refused(
        api.post(
            f"/experiments/{key}", {"status": "stopped"}, headers={"If-Match": tag(experiment)}
        ),
        started.json()["version"],
    )
    assert api.get(f"/experiments/{key}").json()["status"] == "running"
