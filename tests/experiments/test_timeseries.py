"""GET /experiments/:id/timeseries against a direct computation from the raw events: for every
UTC day, the units exposed by its end and their events up to its end, analysed by the engine."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from control_plane.analysis import Moments, SequentialBounds, analyse, moments_from_values
from control_plane.domain.results import partitions
from tests.conftest import Api
from tests.experiments.seed import BASE_MS, DAY_MS, create_experiment, metric, seed_rows

MANUAL = {"name": "Checkout", "type": "manual", "goal": "purchase"}
START_DAY = BASE_MS // DAY_MS


def _data(seed: int) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int | None, int]]]:
    rng = random.Random(seed)
    exposures = []
    events: list[tuple[str, str, int | None, int]] = []
    for i in range(240):
        arm = "control" if i % 2 else "treatment"
        at = BASE_MS + rng.randrange(5 * DAY_MS)
        exposures.append((f"u{i}", arm, at))
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            lift = 400 if arm == "treatment" else 0
            events.append(
                (
                    f"u{i}",
                    "purchase",
                    rng.randrange(100, 2_000) + lift,
                    at + rng.randrange(4 * DAY_MS),
                )
            )
        if rng.random() < 0.2:
            events.append((f"u{i}", "purchase", 999, at - 3_600_000))  # before exposure
    views = random.Random(seed + 1)  # a ratio's denominator: views, some units with none
    for unit, _, at in exposures:
        for _ in range(views.choice([0, 1, 2, 4])):
            events.append((unit, "view", None, at + views.randrange(-DAY_MS, 4 * DAY_MS)))
    return exposures, events


def _expected(
    exposures: list[tuple[str, str, int]],
    events: list[tuple[str, str, int | None, int]],
    aggregation: str,
    engine: str,
    cap: float | None = None,
) -> list[dict[str, Any]]:
    exposed_at = {u: at for u, _, at in exposures}
    last_day = max(
        [at // DAY_MS for _, _, at in exposures]
        + [
            ts // DAY_MS
            for u, n, _, ts in events
            if ts >= exposed_at[u] and (n == "purchase" or aggregation == "ratio")
        ]
    )
    out = []
    p_values: dict[str, float | None] = {}
    bounds: dict[str, SequentialBounds] = {}
    for day in range(START_DAY, last_day + 1):
        end = (day + 1) * DAY_MS
        per_arm: dict[str, list[tuple[float, float]]] = defaultdict(list)
        conversions: dict[str, int] = defaultdict(int)
        for unit, arm, at in exposures:
            if at >= end:
                continue
            mine = [
                v or 0 for u, n, v, ts in events if u == unit and n == "purchase" and at <= ts < end
            ]
            seen = [1 for u, n, _, ts in events if u == unit and n == "view" and at <= ts < end]
            y = {"conversion": float(bool(mine)), "count": float(len(mine))}.get(
                aggregation, float(sum(mine))
            )
            if cap is not None:
                y = min(y, cap)
            # a ratio: revenue per view; a mean: per purchase
            per_arm[arm].append((y, float(len(seen) if aggregation == "ratio" else len(mine))))
            conversions[arm] += bool(mine)

        def moments(arm: str, per_arm: dict[str, list[tuple[float, float]]] = per_arm) -> Moments:
            rows = per_arm[arm]
            if not rows:
                return Moments(0, 0.0, 0.0)
            z = [r[1] for r in rows] if aggregation in ("mean", "ratio") else None
            return moments_from_values([r[0] for r in rows], z)

        result = analyse(
            moments("control"),
            {"treatment": moments("treatment")},
            engine=engine,  # type: ignore[arg-type]
            ratio=aggregation in ("mean", "ratio"),
            previous_p_values=p_values,
            previous_bounds=bounds,
        )
        p_values = {"treatment": result.comparisons["treatment"].always_valid_p_value}
        bounds = dict(result.sequential_bounds)
        out.append(
            {
                "date": datetime.fromtimestamp(day * 86_400, UTC).date().isoformat(),
                "exposed": {a: len(per_arm[a]) for a in ("control", "treatment")},
                "conversions": dict(conversions),
                "rate": {
                    "control": result.control.mean,
                    "treatment": result.treatments["treatment"].mean,
                },
                "comparison": result.comparisons["treatment"],
            }
        )
    return out


@pytest.mark.parametrize(
    ("aggregation", "engine", "capping"),
    [
        ("conversion", "frequentist", None),
        ("count", "bayesian", None),
        ("sum", "sequential", None),
        ("sum", "frequentist", {"type": "absolute", "value": 1_500}),
        ("mean", "frequentist", {"type": "absolute", "value": 2_000}),
        ("ratio", "frequentist", None),
        ("ratio", "bayesian", {"type": "absolute", "value": 2_500}),
    ],
)
def test_timeseries_matches_a_direct_computation(
    api: Api,
    aggregation: str,
    engine: str,
    capping: dict[str, Any] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On PostgreSQL the units are cut into three ranges queried at once (their sums add up)."""
    monkeypatch.setattr(partitions, "_MIN_UNITS_PER_RANGE", 1)
    monkeypatch.setenv("VANE_ANALYSIS_PARTITIONS", "3")
    body: dict[str, Any] = {"name": "M", "key": "m", "aggregation": aggregation}
    if aggregation == "ratio":  # revenue per view
        body["numerator"] = {"event": "purchase", "aggregation": "sum"}
        body["denominator"] = {"event": "view", "aggregation": "count"}
    else:
        body["event"] = "purchase"
    if capping:
        body["capping"] = capping
    metric(api, body)
    exp = create_experiment(api, {**MANUAL, "statsEngine": engine})
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "m"})
    exposures, events = _data(hash(aggregation) % 1000)
    seed_rows(api, exp["key"], exposures, events)
    response = api.get(f"/experiments/{exp['key']}/timeseries")
    assert response.status_code == 200, response.text
    got = response.json()
    assert got["metric"]["key"] == "m"
    want = _expected(exposures, events, aggregation, engine, capping["value"] if capping else None)
    assert [d["date"] for d in got["days"]] == [w["date"] for w in want]
    assert len(want) >= 5
    for day, expect in zip(got["days"], want, strict=True):
        by_key = {v["key"]: v for v in day["variants"]}
        for arm in ("control", "treatment"):
            assert by_key[arm]["exposed"] == expect["exposed"][arm], day["date"]
            assert by_key[arm]["conversions"] == expect["conversions"].get(arm, 0), day["date"]
            if expect["rate"][arm] is None:
                assert by_key[arm]["rate"] is None
            else:
                assert by_key[arm]["rate"] == pytest.approx(expect["rate"][arm]), day["date"]
        c = expect["comparison"]
        t = by_key["treatment"]
        for key, value in (
            ("uplift", c.uplift),
            ("ciLow", c.ci_low),
            ("ciHigh", c.ci_high),
            ("pValue", c.p_value),
        ):
            if value is None:
                assert t[key] is None, (day["date"], key)
            else:
                assert t[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (day["date"], key)
        assert t["significant"] == c.significant


def test_the_last_day_agrees_with_the_results(api: Api) -> None:
    metric(api, {"name": "M", "key": "m", "event": "purchase", "aggregation": "sum"})
    exp = create_experiment(api, MANUAL)
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "m"})
    exposures, events = _data(5)
    seed_rows(api, exp["key"], exposures, events)
    last = api.get(f"/experiments/{exp['key']}/timeseries").json()["days"][-1]
    results = api.get(f"/experiments/{exp['key']}").json()["results"]
    for day_variant, variant in zip(last["variants"], results["variants"], strict=True):
        for name in ("exposed", "conversions", "rate", "uplift", "ciLow", "ciHigh", "pValue"):
            if variant.get(name) is None:
                assert day_variant[name] is None, name
            else:
                assert day_variant[name] == pytest.approx(variant[name]), name


def test_timeseries_errors(api: Api) -> None:
    exp = create_experiment(api, MANUAL)
    empty = api.get(f"/experiments/{exp['key']}/timeseries")
    assert empty.status_code == 200
    assert empty.json()["days"] == []
    assert api.get("/experiments/ghost/timeseries").status_code == 404
    bad = api.get(f"/experiments/{exp['key']}/timeseries?metric=nope")
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "metric"
