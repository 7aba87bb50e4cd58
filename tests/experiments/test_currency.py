"""A metric may name a currency: its ``sum`` and ``mean`` then count only events in that
currency (events in another currency, or with none, are left out), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.experiments.seed import create_experiment, metric


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


def test_currency_is_a_validated_metric_setting(api: Api) -> None:
    created = metric(api, {"name": "Revenue", "event": "purchase", "aggregation": "sum"})
    assert created["currency"] is None
    assert created["version"] == 1
    for body in (
        {"aggregation": "sum", "currency": "eur"},
        {"aggregation": "mean", "currency": "EURO"},
        {"aggregation": "count", "currency": "EUR"},
        {"aggregation": "conversion", "currency": "EUR"},
    ):
        response = api.post("/metrics", {"name": "x", "event": "e", **body})
        assert response.status_code == 422, (body, response.text)
        assert fields(response) == ["currency"]
    changed = api.patch("/metrics/revenue", {"currency": "EUR"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["currency"] == "EUR"
    assert changed.json()["version"] == 2
    assert changed.headers["ETag"] == '"2"'
    assert api.patch("/metrics/revenue", {"currency": "EUR"}).json()["version"] == 2  # no change
    stale = api.patch("/metrics/revenue", {"currency": None}, headers={"If-Match": '"1"'})
    assert stale.status_code == 412
    assert api.get("/metrics/revenue").json()["currency"] == "EUR"
    audit = api.get("/audit", params={"resourceType": "metric"}).json()["entries"]
    assert [e["action"] for e in audit] == ["metric.update", "metric.create"]


def test_sum_and_mean_count_only_events_in_the_metrics_currency(api: Api) -> None:
    exp = create_experiment(api, {"name": "Checkout", "type": "manual", "goal": "purchase"})
    metric(
        api, {"name": "Revenue EUR", "event": "purchase", "aggregation": "sum", "currency": "EUR"}
    )
    metric(
        api, {"name": "Order EUR", "event": "purchase", "aggregation": "mean", "currency": "EUR"}
    )
    metric(api, {"name": "Revenue any", "event": "purchase", "aggregation": "sum"})
    key = exp["key"]
    by_arm: dict[str, list[str]] = {}
    for i in range(40):
        unit = f"user-{i}"
        variant = api.post(f"/experiments/{key}/assign", {"unit": unit}).json()["variant"]
        by_arm.setdefault(variant, []).append(unit)
    assert set(by_arm) == {"control", "treatment"}
    events = []
    expected: dict[str, dict[str, float]] = {}
    for arm, units in by_arm.items():
        eur, eur_count, everything = 0, 0, 0
        for n, unit in enumerate(units):
            for value, currency in ((1000 + n, "EUR"), (500, None), (70_000, "JPY")):
                body: dict[str, Any] = {"unit": unit, "event": "purchase", "value": value}
                if currency:
                    body["currency"] = currency
                events.append(body)
                everything += value
                if currency == "EUR":
                    eur += value
                    eur_count += 1
        expected[arm] = {
            "revenue-eur": eur / len(units),
            "order-eur": eur / eur_count,
            "revenue-any": everything / len(units),
        }
    assert api.post("/events", {"events": events}, key=api.keys["server"]).status_code == 200
    for metric_key in ("revenue-eur", "order-eur", "revenue-any"):
        set_primary = api.put(f"/experiments/{key}/metrics", {"primary": metric_key})
        assert set_primary.status_code == 200, set_primary.text
        results = api.get(f"/experiments/{key}").json()["results"]
        assert results["metric"]["currency"] == ("EUR" if "eur" in metric_key else None)
        for variant in results["variants"]:
            assert variant["rate"] == pytest.approx(expected[variant["key"]][metric_key]), (
                metric_key,
                variant,
            )
        series = api.get(f"/experiments/{key}/timeseries").json()
        last = {v["key"]: v for v in series["days"][-1]["variants"]}
        for arm, values in expected.items():
            assert last[arm]["rate"] == pytest.approx(values[metric_key]), (metric_key, last)
