"""Layers and holdouts in the project document (issue #36): exported sorted by key, never a
holdout's results; planned field by field and applied through the layers' services, before the
experiments that name them; a holdout's share and layer, fixed once made, refused naming the
path, nothing written."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, ok, plan


def _seed(api: Api) -> None:
    ok(
        api.post(
            "/metrics", {"key": "revenue", "name": "Revenue", "event": "buy", "aggregation": "sum"}
        ),
        201,
    )
    ok(api.post("/layers", {"key": "home", "name": "Home page"}), 201)
    ok(api.post("/layers", {"key": "checkout", "name": "Checkout", "description": "pay"}), 201)
    body = {"key": "global", "name": "Global", "share": 0.05, "metrics": ["revenue"]}
    ok(api.post("/holdouts", body), 201)


def _holdout(document: dict[str, Any], key: str) -> dict[str, Any]:
    return next(x for x in document["holdouts"] if x["key"] == key)


def test_layers_and_holdouts_are_exported_sorted(api: Api) -> None:
    _seed(api)
    document = export(api)
    assert document["layers"] == [
        {"key": "checkout", "name": "Checkout", "description": "pay"},
        {"key": "home", "name": "Home page", "description": ""},
    ]
    assert document["holdouts"] == [
        {
            "key": "global",
            "name": "Global",
            "description": "",
            "share": 0.05,
            "metrics": ["revenue"],
            "status": "running",
        }
    ]
    assert plan(api, document)["hasChanges"] is False
    assert export(api) == document


def test_an_edit_plans_to_that_edit_and_applies(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    changed["layers"][1]["description"] = "the home page"
    _holdout(changed, "global")["status"] = "stopped"
    found = plan(api, changed)
    assert sorted(
        (c["kind"], c["key"], c["action"], x["path"], x["before"], x["after"])
        for c in found["changes"]
        for x in c["changes"]
    ) == [
        ("holdout", "global", "update", "status", "running", "stopped"),
        ("layer", "home", "update", "description", "", "the home page"),
    ]
    assert (found["versions"]["layer:home"], found["versions"]["holdout:global"]) == (1, 1)
    apply(api, changed, versions=found["versions"])
    assert ok(api.get("/holdouts/global"))["status"] == "stopped"
    assert ok(api.get("/layers/home"))["description"] == "the home page"
    assert export(api) == changed
    assert plan(api, changed)["hasChanges"] is False


def test_new_ones_are_made_before_the_experiments_that_name_them(api: Api) -> None:
    _seed(api)
    changed = edited(export(api))
    changed["layers"].append({"key": "search"})
    changed["holdouts"].append(
        {"key": "search-holdout", "share": 0.1, "layer": "search", "metrics": ["revenue"]}
    )
    changed["holdouts"].append(
        {"key": "old", "share": 0.2, "metrics": ["revenue"], "status": "stopped"}
    )
    changed["experiments"] = [
        {"key": "ranking", "goal": "buy", "layer": "search", "traffic": 0.5, "status": "running"}
    ]
    found = plan(api, changed)
    assert {(c["kind"], c["key"], c["action"]) for c in found["changes"]} == {
        ("layer", "search", "create"),
        ("holdout", "search-holdout", "create"),
        ("holdout", "old", "create"),
        ("experiment", "ranking", "create"),
    }
    apply(api, changed, versions=found["versions"])
    assert ok(api.get("/holdouts/search-holdout"))["layer"] == "search"
    assert ok(api.get("/holdouts/old"))["status"] == "stopped"
    ranking = ok(api.get("/experiments/ranking"))
    assert (ranking["layer"], ranking["traffic"], ranking["status"]) == ("search", 0.5, "running")
    assert plan(api, changed)["hasChanges"] is False
    assert [x["key"] for x in export(api)["layers"]] == ["checkout", "home", "search"]


def test_a_holdouts_share_and_layer_are_fixed(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    held = _holdout(changed, "global")
    held["share"] = 0.5
    held["layer"] = "home"
    changed["layers"].append({"key": "home"})  # listed twice
    refused = api.post("/plan", {"document": changed})
    assert refused.status_code == 422, refused.text
    assert {d["field"] for d in refused.json()["error"]["details"]} == {
        "holdouts[0].share",
        "holdouts[0].layer",
        "layers[2].key",
    }
    bad = edited(document)
    bad["holdouts"].append({"key": "none", "share": 0.1, "metrics": ["nope"]})
    refused = api.post("/apply", {"document": bad})
    assert refused.status_code == 422, refused.text
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["holdouts[1].metrics[0]"]
    assert export(api) == document  # nothing written


def test_the_schema_describes_layers_and_holdouts(api: Api) -> None:
    body = ok(api.client.get("/schema/project.json"))
    properties = body["$defs"]["ProjectDoc"]["properties"]
    assert {"layers", "holdouts"} <= set(properties)
    assert set(body["$defs"]["HoldoutDoc"]["required"]) == {"key", "share", "metrics"}
    assert "exposed" not in body["$defs"]["HoldoutDoc"]["properties"]
