"""Outlier capping of sum and mean metrics, checked against a direct computation from the raw
events: each unit's value capped at a fixed amount or at a percentile of the pooled units."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from tests.conftest import Api
from tests.experiments.seed import create_experiment, metric, seed

MANUAL = {"name": "Checkout", "type": "manual", "goal": "purchase"}


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


def test_capping_is_a_validated_metric_setting(api: Api) -> None:
    created = metric(
        api,
        {
            "name": "Revenue",
            "event": "purchase",
            "aggregation": "sum",
            "capping": {"type": "percentile", "value": 0.99},
        },
    )
    assert created["capping"] == {"type": "percentile", "value": 0.99}
    assert metric(api, {"name": "Plain", "event": "e", "aggregation": "sum"})["capping"] is None
    for body, field in [
        ({"aggregation": "conversion", "capping": {"type": "absolute", "value": 5}}, "capping"),
        ({"aggregation": "count", "capping": {"type": "absolute", "value": 5}}, "capping"),
        ({"aggregation": "sum", "capping": {"type": "percentile", "value": 1.5}}, "capping.value"),
        ({"aggregation": "sum", "capping": {"type": "percentile", "value": 0}}, "capping.value"),
        ({"aggregation": "mean", "capping": {"type": "absolute", "value": -3}}, "capping.value"),
        ({"aggregation": "sum", "capping": {"type": "winsor", "value": 0.9}}, "capping.type"),
        ({"aggregation": "sum", "capping": {"type": "absolute"}}, "capping.value"),
    ]:
        response = api.post("/metrics", {"name": "x", "event": "e", **body})
        assert response.status_code == 422, (body, response.text)
        assert field in fields(response), (body, response.text)
    changed = api.patch("/metrics/revenue", {"capping": {"type": "absolute", "value": 10_000}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["capping"] == {"type": "absolute", "value": 10_000}
    assert api.get("/metrics/revenue").json()["capping"]["type"] == "absolute"
    assert api.patch("/metrics/revenue", {"capping": None}).json()["capping"] is None
    bad = api.patch("/metrics/plain", {"capping": {"type": "percentile", "value": 2}})
    assert bad.status_code == 422
    assert fields(bad) == ["capping.value"]
    assert api.patch("/metrics/plain", {"event": "other"}).status_code == 422  # not changeable
    assert api.patch("/metrics/ghost", {"capping": None}).status_code == 404


def _raw_arms(rng: np.random.Generator) -> dict[str, list[list[int | None]]]:
    """Heavy-tailed revenue: most units buy nothing, a few whales buy a lot."""
    arms: dict[str, list[list[int | None]]] = {}
    for arm, scale in (("control", 1.0), ("treatment", 1.15)):
        units: list[list[int | None]] = []
        for _ in range(400):
            if rng.random() < 0.6:
                units.append([])
                continue
            orders = int(rng.integers(1, 4))
            units.append([int(scale * rng.lognormal(7, 1.5)) for _ in range(orders)])
        arms[arm] = units
    return arms


def _nearest_rank(values: list[float], percentile: float) -> float:
    ordered = sorted(values)
    k = max(1, math.ceil(round(percentile * len(ordered), 9)))
    return ordered[k - 1]


@pytest.mark.parametrize("capping", [("absolute", 5_000.0), ("percentile", 0.9)])
def test_capped_results_match_a_direct_computation(api: Api, capping: tuple[str, float]) -> None:
    kind, value = capping
    metric(
        api,
        {
            "name": "Revenue",
            "event": "purchase",
            "aggregation": "sum",
            "capping": {"type": kind, "value": value},
        },
    )
    exp = create_experiment(api, MANUAL)
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "revenue"})
    arms = _raw_arms(np.random.default_rng(3))
    seed(api, exp["key"], arms, event="purchase")
    per_unit = {arm: [float(sum(v or 0 for v in u)) for u in units] for arm, units in arms.items()}
    pooled = per_unit["control"] + per_unit["treatment"]
    cap = value if kind == "absolute" else _nearest_rank(pooled, value)
    assert sum(v > cap for v in pooled) > 10  # the cap bites
    capped = {arm: np.minimum(np.array(v), cap) for arm, v in per_unit.items()}

    results = api.get(f"/experiments/{exp['key']}").json()["results"]
    assert results["capping"]["cap"] == pytest.approx(cap)
    assert results["capping"]["type"] == kind
    by_key = {v["key"]: v for v in results["variants"]}
    for arm, values in capped.items():
        assert by_key[arm]["rate"] == pytest.approx(values.mean())
        assert by_key[arm]["stdError"] == pytest.approx(values.std(ddof=1) / math.sqrt(values.size))
    welch = stats.ttest_ind(capped["treatment"], capped["control"], equal_var=False)
    assert by_key["treatment"]["pValue"] == pytest.approx(welch.pvalue, rel=1e-6)
    assert by_key["treatment"]["uplift"] == pytest.approx(
        100 * (capped["treatment"].mean() / capped["control"].mean() - 1)
    )


def test_capping_a_ratio_metric_caps_each_units_sum(api: Api) -> None:
    metric(
        api,
        {
            "name": "Order value",
            "event": "purchase",
            "aggregation": "mean",
            "capping": {"type": "absolute", "value": 3_000},
        },
    )
    exp = create_experiment(api, MANUAL)
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "order-value"})
    arms = _raw_arms(np.random.default_rng(4))
    seed(api, exp["key"], arms, event="purchase")
    results = api.get(f"/experiments/{exp['key']}").json()["results"]
    by_key = {v["key"]: v for v in results["variants"]}
    for arm, units in arms.items():
        y = sum(min(float(sum(v or 0 for v in u)), 3_000.0) for u in units)
        z = sum(len(u) for u in units)
        assert by_key[arm]["rate"] == pytest.approx(y / z)


def test_a_percentile_at_zero_caps_nothing_and_says_so(api: Api) -> None:
    metric(
        api,
        {
            "name": "Revenue",
            "event": "purchase",
            "aggregation": "sum",
            "capping": {"type": "percentile", "value": 0.5},
        },
    )
    exp = create_experiment(api, MANUAL)
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "revenue"})
    seed(
        api,
        exp["key"],
        {"control": [[100]] * 10 + [[]] * 90, "treatment": [[200]] * 10 + [[]] * 90},
        event="purchase",
    )
    results = api.get(f"/experiments/{exp['key']}").json()["results"]
    assert results["capping"]["cap"] is None
    assert "nothing capped" in results["capping"]["note"]
    by_key = {v["key"]: v for v in results["variants"]}
    assert by_key["treatment"]["rate"] == pytest.approx(20.0)
