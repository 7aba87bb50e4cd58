"""Editing and deleting experiments: what may change while nothing is exposed, what at any
time, and what may be deleted. Every edit audited; a stale If-Match is 412."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.experiments.seed import create_experiment

CTA = {
    "name": "Hero button",
    "type": "cta",
    "selector": "#buy",
    "url": "/pricing",
    "activate": False,
    "variants": [{"key": "control", "content": ""}, {"key": "bold", "content": "Buy now"}],
}


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


def test_page_fields_change_only_while_nothing_is_exposed(api: Api) -> None:
    exp = create_experiment(api, CTA)
    path = f"/experiments/{exp['key']}"
    edit = {
        "name": "Hero CTA",
        "description": "Does a bolder label sell more?",
        "url": "/pricing*",
        "selector": "#buy-button",
        "goal": "purchase",
        "variants": [{"key": "bold", "content": "Buy it now", "bg": "#000", "color": "#fff"}],
    }
    changed = api.patch(path, edit, headers={"If-Match": f'"{exp["version"]}"'})
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["name"], body["description"], body["url"], body["selector"], body["goal"]) == (
        "Hero CTA",
        "Does a bolder label sell more?",
        "/pricing*",
        "#buy-button",
        "purchase",
    )
    bold = next(v for v in body["variants"] if v["key"] == "bold")
    assert (bold["content"], bold["bg"], bold["color"]) == ("Buy it now", "#000", "#fff")
    assert body["version"] == exp["version"] + 1
    assert changed.headers["ETag"] == f'"{body["version"]}"'

    assert api.post(path, {"status": "running"}).status_code == 200
    assert api.post(f"{path}/assign", {"unit": "u1", "url": "/pricing"}).status_code == 200
    assert api.get(path).json()["exposed"] == 1
    exposed = api.patch(path, {"selector": "#other"})
    assert exposed.status_code == 409, exposed.text
    assert "selector" in exposed.json()["error"]["message"]
    refused = api.patch(path, {"variants": [{"key": "bold", "content": "Other"}]})
    assert refused.status_code == 409
    assert api.get(path).json()["selector"] == "#buy-button"
    # the analysis and the description may change at any time
    anytime = api.patch(path, {"statsEngine": "bayesian", "description": "now Bayesian"})
    assert anytime.status_code == 200, anytime.text
    assert anytime.json()["statsEngine"] == "bayesian"
    assert api.get(path).json()["results"]["engine"] == "bayesian"

    entries = api.get("/audit", params={"resourceType": "experiment"}).json()["entries"]
    updates = [e for e in entries if e["action"] == "experiment.update"]
    assert [e["after"]["statsEngine"] for e in updates] == ["bayesian", "frequentist"]


def test_bad_edits_are_422_naming_the_field(api: Api) -> None:
    exp = create_experiment(api, CTA)
    path = f"/experiments/{exp['key']}"
    for body, field in [
        ({"url": "pricing"}, "url"),
        ({"selector": ""}, "selector"),
        ({"goal": " "}, "goal"),
        ({"statsEngine": "magic"}, "statsEngine"),
        ({"variants": [{"key": "ghost", "content": "x"}]}, "variants[0].key"),
        ({"key": "renamed"}, "key"),
    ]:
        response = api.patch(path, body)
        assert response.status_code == 422, (body, response.text)
        assert fields(response) == [field], body
    manual = create_experiment(api, {"name": "Manual", "goal": "buy", "activate": False})
    wrong = api.patch(
        f"/experiments/{manual['key']}", {"variants": [{"key": "treatment", "bg": "#f00"}]}
    )
    assert wrong.status_code == 422
    assert fields(wrong) == ["variants[0].bg"]
    assert api.get(path).json()["version"] == exp["version"]


def test_drafts_and_stopped_experiments_are_deleted_running_ones_are_not(api: Api) -> None:
    draft = create_experiment(api, CTA)
    running = create_experiment(api, {"name": "Live", "goal": "buy"})
    assert api.delete(f"/experiments/{running['key']}").status_code == 409
    assert api.post(f"/experiments/{running['key']}/assign", {"unit": "u1"}).status_code == 200
    stale = api.delete(f"/experiments/{draft['key']}", headers={"If-Match": '"99"'})
    assert stale.status_code == 412
    deleted = api.delete(f"/experiments/{draft['key']}")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"id": draft["id"], "key": draft["key"], "deleted": True}
    assert api.get(f"/experiments/{draft['key']}").status_code == 404
    assert api.post(f"/experiments/{running['key']}", {"status": "stopped"}).status_code == 200
    assert api.delete(f"/experiments/{running['key']}").status_code == 200
    assert api.get("/experiments").json()["experiments"] == []
    # a new experiment under the same key starts with no exposures of the old one
    again = create_experiment(api, {"name": "Live", "key": running["key"], "goal": "buy"})
    assert again["exposed"] == 0
    actions = [
        e["action"]
        for e in api.get("/audit", params={"resourceType": "experiment"}).json()["entries"]
    ]
    assert actions[:2] == ["experiment.create", "experiment.delete"]
