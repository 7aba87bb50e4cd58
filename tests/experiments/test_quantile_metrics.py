"""Quantile metrics through the API: the p90 of page load times per arm, its standard error and
the test of the difference, against numpy and scipy over the same rows."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from scipy import stats

from tests.conftest import Api
from tests.experiments.seed import BASE_MS, DAY_MS, create_experiment, metric, seed_rows

MANUAL = {"name": "Fast checkout", "type": "manual", "goal": "purchase"}
P90 = {"name": "Load time p90", "key": "load-p90", "event": "page_load", "aggregation": "quantile"}
TOL = 1e-9


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**P90}, "quantile"),
        ({**P90, "quantile": 1.0}, "quantile"),
        ({**P90, "quantile": 0.0}, "quantile"),
        ({**P90, "quantile": 0.9, "capping": {"type": "absolute", "value": 5}}, "capping"),
        ({**P90, "aggregation": "sum", "quantile": 0.9}, "quantile"),
        ({**P90, "quantile": 0.9, "currency": "euro"}, "currency"),
    ],
)
def test_invalid_quantile_metrics_name_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    response = api.post("/metrics", body)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]]


def _rows() -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int | None, int]]]:
    """800 units, 0 to 6 page loads each (ms), a unit's device setting its speed; the
    treatment loads 30 % faster. Loads before exposure, and without a value, count nowhere."""
    rng = random.Random(4)
    exposures: list[tuple[str, str, int]] = []
    events: list[tuple[str, str, int | None, int]] = []
    for i in range(800):
        unit, arm = f"u{i}", ("control", "treatment")[i % 2]
        at = BASE_MS + rng.randrange(2 * DAY_MS)
        exposures.append((unit, arm, at))
        device = rng.lognormvariate(6.5, 0.5) * (0.7 if arm == "treatment" else 1.0)
        for _ in range(rng.choice([0, 1, 1, 2, 3, 6])):
            load = int(device * rng.lognormvariate(0.0, 0.3))
            events.append((unit, "page_load", load, at + rng.randrange(DAY_MS)))
        events.append((unit, "page_load", 99_999, at - 1))  # before exposure
        events.append((unit, "page_load", None, at + 1))  # no value
    return exposures, events


def _reference(
    exposures: list[tuple[str, str, int]],
    events: list[tuple[str, str, int | None, int]],
    p: float,
) -> dict[str, dict[str, float]]:
    """Per arm: the nearest-rank quantile of its loads, and its standard error from the order
    statistics at ranks p -/+ 1.645 sigma / sqrt(m), sigma the delta method's over the units."""
    arm_of = {u: a for u, a, _ in exposures}
    at_of = {u: at for u, _, at in exposures}
    out = {}
    for arm in ("control", "treatment"):
        loads: dict[str, list[int]] = {}
        for unit, _, value, ts in events:
            if arm_of[unit] == arm and value is not None and ts >= at_of[unit]:
                loads.setdefault(unit, []).append(value)
        values = np.sort(np.concatenate([np.array(v, dtype=float) for v in loads.values()]))
        estimate = float(np.quantile(values, p, method="inverted_cdf"))
        s = np.array([sum(x <= estimate for x in v) for v in loads.values()], dtype=float)
        n = np.array([len(v) for v in loads.values()], dtype=float)
        sigma = (s - p * n).std(ddof=1) / n.mean()
        half = stats.norm.ppf(0.95) * sigma / math.sqrt(len(loads))

        def rank(q: float, values: np.ndarray = values) -> int:
            return min(values.size, max(1, math.ceil(round(q * values.size, 9))))

        low, high = values[rank(p - half) - 1], values[rank(p + half) - 1]
        out[arm] = {
            "estimate": estimate,
            "se": (high - low) / (2 * stats.norm.ppf(0.95)),
            "units": float(len(loads)),
        }
    return out


@pytest.mark.parametrize("p", [0.5, 0.9])
def test_quantile_results_match_numpy(api: Api, p: float) -> None:
    metric(api, {**P90, "quantile": p})
    exp = create_experiment(api, {**MANUAL, "cuped": True})
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "load-p90"})
    exposures, events = _rows()
    seed_rows(api, exp["key"], exposures, events)
    results = api.get(f"/experiments/{exp['key']}").json()["results"]
    assert results["metric"]["quantile"] == p
    by_key = {v["key"]: v for v in results["variants"]}
    want = _reference(exposures, events, p)
    for arm in ("control", "treatment"):
        assert by_key[arm]["exposed"] == 400
        assert by_key[arm]["unitsWithEvents"] == want[arm]["units"]
        assert by_key[arm]["rate"] == want[arm]["estimate"]
        assert by_key[arm]["stdError"] == pytest.approx(want[arm]["se"], rel=TOL)
    c, t = want["control"], want["treatment"]
    treatment = by_key["treatment"]
    se = math.hypot(c["se"], t["se"])
    difference = t["estimate"] - c["estimate"]
    assert treatment["difference"] == pytest.approx(difference, rel=TOL)
    assert treatment["differenceStdError"] == pytest.approx(se, rel=TOL)
    assert treatment["pValue"] == pytest.approx(2 * stats.norm.sf(abs(difference / se)), rel=TOL)
    assert treatment["test"] == "z"
    q = stats.norm.ppf(0.975)
    assert treatment["differenceCiLow"] == pytest.approx(difference - q * se, rel=TOL)
    assert treatment["significant"] is True  # 30 % faster, found
    assert treatment["uplift"] < 0
    assert results["cuped"]["applied"] is False  # CUPED adjusts means: it says why not
    assert "quantile" in results["cuped"]["note"]
    assert any(f"p{100 * p:g} of the value of 'page_load'" in n for n in results["notes"])
    series = api.get(f"/experiments/{exp['key']}/timeseries").json()
    assert series["days"] == []
    assert "quantile" in series["notes"][0]
