"""Metrics in the project document (issue #36): exported, planned and applied like the rest;
what cannot change once a metric is made is refused naming its path."""

from __future__ import annotations

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, ok, plan


def test_metrics_round_trip(api: Api) -> None:
    revenue = {
        "key": "revenue",
        "name": "Revenue",
        "event": "buy",
        "aggregation": "sum",
        "capping": {"type": "absolute", "value": 500},
        "currency": "EUR",
    }
    ok(api.post("/metrics", revenue), 201)
    document = export(api)
    (metric,) = document["metrics"]
    assert metric["capping"] == {"type": "absolute", "value": 500.0}
    assert plan(api, document)["hasChanges"] is False

    changed = edited(document)
    del changed["metrics"][0]["capping"]
    changed["metrics"][0]["name"] = "Revenue (EUR)"
    changed["metrics"].append(
        {
            "key": "order-value",
            "name": "Order value",
            "aggregation": "ratio",
            "numerator": {"event": "buy", "aggregation": "sum"},
            "denominator": {"event": "order", "aggregation": "count"},
        }
    )
    found = plan(api, changed)
    assert {(c["key"], c["action"]) for c in found["changes"]} == {
        ("revenue", "update"),
        ("order-value", "create"),
    }
    update = next(c for c in found["changes"] if c["key"] == "revenue")
    assert {c["path"] for c in update["changes"]} == {"name", "capping"}
    apply(api, changed, versions=found["versions"])
    assert ok(api.get("/metrics/revenue"))["capping"] is None
    assert plan(api, changed)["hasChanges"] is False
    assert [m["key"] for m in export(api)["metrics"]] == ["order-value", "revenue"]

    fixed = edited(changed)
    fixed["metrics"][0]["aggregation"] = "mean"
    refused = api.post("/apply", {"document": fixed})
    assert refused.status_code == 422, refused.text
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["metrics[0].aggregation"]

    pruned = edited(changed)
    pruned["metrics"] = [m for m in pruned["metrics"] if m["key"] == "order-value"]
    apply(api, pruned, prune=True)
    assert api.get("/metrics/revenue").status_code == 404
