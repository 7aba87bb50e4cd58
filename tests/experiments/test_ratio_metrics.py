"""Ratio metrics through the API: revenue per session (the sum of ``purchase`` values over the
count of ``session`` events per unit), analysed over all exposed units with the delta method,
with and without CUPED, against numpy over the same rows to 1e-9."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from scipy import stats

from tests.conftest import Api
from tests.experiments.seed import BASE_MS, DAY_MS, create_experiment, metric, seed_rows

MANUAL = {"name": "Checkout", "type": "manual", "goal": "purchase"}
REVENUE_PER_SESSION = {
    "name": "Revenue per session",
    "key": "rps",
    "aggregation": "ratio",
    "numerator": {"event": "purchase", "aggregation": "sum"},
    "denominator": {"event": "session", "aggregation": "count"},
}
TOL = 1e-9


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"aggregation": "ratio", "numerator": {"event": "a", "aggregation": "sum"}},
            "denominator",
        ),
        (
            {"aggregation": "ratio", "denominator": {"event": "a", "aggregation": "sum"}},
            "numerator",
        ),
        (
            {**REVENUE_PER_SESSION, "numerator": {"event": " ", "aggregation": "sum"}},
            "numerator.event",
        ),
        ({**REVENUE_PER_SESSION, "event": "order"}, "event"),
        (
            {
                "aggregation": "sum",
                "event": "a",
                "denominator": {"event": "b", "aggregation": "count"},
            },
            "denominator",
        ),
        ({"aggregation": "sum"}, "event"),
        (
            {
                **REVENUE_PER_SESSION,
                "numerator": {"event": "click", "aggregation": "count"},
                "currency": "EUR",
            },
            "currency",
        ),
        (
            {**REVENUE_PER_SESSION, "denominator": {"event": "s", "aggregation": "median"}},
            "denominator.aggregation",
        ),
    ],
)
def test_invalid_ratio_metrics_name_the_field(
    refusing_api: Api, body: dict[str, Any], field: str
) -> None:
    response = refusing_api.post("/metrics", {"name": "Bad", **body})
    assert response.status_code == 422, response.text
    fields = [d["field"] for d in response.json()["error"]["details"]]
    assert field in fields, fields


def test_a_ratio_metric_reads_back_as_created(api: Api) -> None:
    created = metric(api, REVENUE_PER_SESSION)
    assert created["aggregation"] == "ratio"
    assert created["event"] == "purchase"
    assert created["numerator"] == {"event": "purchase", "aggregation": "sum"}
    assert created["denominator"] == {"event": "session", "aggregation": "count"}
    assert api.get("/metrics/rps").json() == created
    plain = metric(api, {"name": "Revenue", "event": "purchase", "aggregation": "sum"})
    assert plain["numerator"] is None
    assert plain["denominator"] is None


def _rows(seed: int) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int | None, int]]]:
    """600 units; each with sessions and purchases before exposure (CUPED's covariates) and
    after, a unit's spending level shared by both; the treatment spends 8 % more per session."""
    rng = random.Random(seed)
    exposures: list[tuple[str, str, int]] = []
    events: list[tuple[str, str, int | None, int]] = []
    for i in range(600):
        unit, arm = f"u{i}", ("control", "treatment")[i % 2]
        at = BASE_MS + rng.randrange(3 * DAY_MS)
        exposures.append((unit, arm, at))
        level = rng.gammavariate(2.0, 1_000.0) * (1.08 if arm == "treatment" else 1.0)
        for start, end in ((at - 10 * DAY_MS, at - 1), (at, at + 5 * DAY_MS)):
            for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
                events.append((unit, "session", None, rng.randrange(start, end)))
                if rng.random() < 0.4:
                    value = int(rng.gammavariate(2.0, level / 2.0))
                    events.append((unit, "purchase", value, rng.randrange(start, end)))
        if rng.random() < 0.05:  # too early for CUPED's 14 days: counted nowhere
            events.append((unit, "purchase", 50_000, at - 20 * DAY_MS))
    return exposures, events


def _reference(
    exposures: list[tuple[str, str, int]],
    events: list[tuple[str, str, int | None, int]],
    cuped: bool,
) -> dict[str, dict[str, float]]:
    """Per arm: the ratio (CUPED-adjusted when asked), its standard error, and the unadjusted
    ratio, from the delta method's linearised unit values computed here."""
    window = 14 * DAY_MS
    per_unit: dict[str, dict[str, float]] = {u: dict.fromkeys("yzxw", 0.0) for u, _, _ in exposures}
    exposed_at = {u: at for u, _, at in exposures}
    for unit, name, value, ts in events:
        at = exposed_at[unit]
        after, before = ts >= at, at - window <= ts < at
        if name == "purchase" and (after or before):
            per_unit[unit]["y" if after else "x"] += value or 0
        if name == "session" and (after or before):
            per_unit[unit]["z" if after else "w"] += 1
    arms = {
        arm: {k: np.array([per_unit[u][k] for u, a, _ in exposures if a == arm]) for k in "yzxw"}
        for arm in ("control", "treatment")
    }
    pooled = {k: np.concatenate([a[k] for a in arms.values()]) for k in "yzxw"}

    def linear(a: dict[str, np.ndarray]) -> tuple[float, float, np.ndarray, np.ndarray]:
        r, s = a["y"].sum() / a["z"].sum(), a["x"].sum() / a["w"].sum()
        return r, s, (a["y"] - r * a["z"]) / a["z"].mean(), (a["x"] - s * a["w"]) / a["w"].mean()

    _, s_pooled, u_p, v_p = linear(pooled)
    theta = float(np.cov(u_p, v_p, ddof=1)[0, 1] / v_p.var(ddof=1))
    out = {}
    for arm, a in arms.items():
        r, s, u, v = linear(a)
        n = a["y"].size
        adjusted = u - theta * v if cuped else u
        out[arm] = {
            "rate": r,
            "estimate": r - theta * (s - s_pooled) if cuped else r,
            "se": math.sqrt(adjusted.var(ddof=1) / n),
            "theta": theta,
        }
    return out


@pytest.mark.parametrize("cuped", [False, True])
def test_ratio_results_match_numpy(api: Api, cuped: bool) -> None:
    metric(api, REVENUE_PER_SESSION)
    exp = create_experiment(api, {**MANUAL, "cuped": cuped})
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "rps"})
    exposures, events = _rows(11)
    seed_rows(api, exp["key"], exposures, events)
    response = api.get(f"/experiments/{exp['key']}")
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results["metric"]["denominator"] == REVENUE_PER_SESSION["denominator"]
    by_key = {v["key"]: v for v in results["variants"]}
    want = _reference(exposures, events, cuped)
    c, t = want["control"], want["treatment"]
    for arm in ("control", "treatment"):
        assert by_key[arm]["exposed"] == 300
        assert by_key[arm]["rate"] == pytest.approx(want[arm]["rate"], rel=TOL)
        if cuped:
            assert by_key[arm]["adjustedRate"] == pytest.approx(want[arm]["estimate"], rel=TOL)
        else:
            assert by_key[arm]["stdError"] == pytest.approx(want[arm]["se"], rel=TOL)
    treatment = by_key["treatment"]
    se = math.sqrt(t["se"] ** 2 + c["se"] ** 2)
    difference = t["estimate"] - c["estimate"]
    assert treatment["difference"] == pytest.approx(difference, rel=TOL)
    assert treatment["differenceStdError"] == pytest.approx(se, rel=TOL)
    assert treatment["pValue"] == pytest.approx(2 * stats.norm.sf(abs(difference / se)), rel=TOL)
    assert treatment["test"] == "z"
    if cuped:
        assert results["cuped"]["applied"] is True
        assert results["cuped"]["theta"] == pytest.approx(t["theta"], rel=TOL)
        assert treatment["varianceReduction"] > 0
    note = "sum of value of 'purchase' over the count of 'session'"
    assert any(note in n for n in results["notes"]), results["notes"]
