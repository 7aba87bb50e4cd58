"""Results by dimension: per slice of a captured attribute (or of an event's property), the
totals' blocks computed again, against numpy and scipy over the same rows; the slices add up to
the totals; small slices are shown, not tested; p-values are adjusted across slices (Holm)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from scipy import stats
from sqlalchemy import create_engine, update

from control_plane.db.engine import sync_url
from control_plane.db.models import Experiment
from tests.conftest import Api
from tests.experiments.seed import (
    BASE_MS,
    DAY_MS,
    create_experiment,
    metric,
    seed_attributes,
    seed_props,
    seed_rows,
)

MANUAL = {"name": "Checkout", "type": "manual", "goal": "purchase"}
COUNTRIES = [f"C{i:02d}" for i in range(20)]  # twenty values, the first the most common
TOL = 1e-9


def declare(api: Api, key: str, dimensions: list[str]) -> None:
    engine = create_engine(sync_url(api.database_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                update(Experiment).where(Experiment.key == key).values(dimensions=dimensions)
            )
    finally:
        engine.dispose()


def _data(
    seed: int,
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int | None, int]], dict[str, str]]:
    """3,000 units over twenty countries (skewed, 5 % without one); revenue per unit with a
    treatment lift in C00 only."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(20)]
    exposures: list[tuple[str, str, int]] = []
    events: list[tuple[str, str, int | None, int]] = []
    country: dict[str, str] = {}
    for i in range(3_000):
        unit, arm = f"u{i}", ("control", "treatment")[i % 2]
        at = BASE_MS + rng.randrange(DAY_MS)
        exposures.append((unit, arm, at))
        if rng.random() > 0.05:
            country[unit] = rng.choices(COUNTRIES, weights)[0]
        lift = 1.3 if arm == "treatment" and country.get(unit) == "C00" else 1.0
        for _ in range(rng.choice([0, 0, 1, 2])):
            events.append((unit, "purchase", int(rng.randrange(500, 5_000) * lift), at + 1_000))
    return exposures, events, country


def _per_unit(
    exposures: list[tuple[str, str, int]], events: list[tuple[str, str, int | None, int]]
) -> dict[str, float]:
    revenue: dict[str, float] = defaultdict(float)
    for unit, _, value, _ in events:
        revenue[unit] += value or 0
    return {unit: revenue[unit] for unit, _, _ in exposures}


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment, written out here."""
    order = np.argsort(p_values, kind="stable")
    m, running, out = len(p_values), 0.0, [0.0] * len(p_values)
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        out[index] = running
    return out


@pytest.fixture
def experiment(api: Api) -> dict[str, Any]:
    metric(api, {"name": "Revenue", "key": "revenue", "event": "purchase", "aggregation": "sum"})
    exp = create_experiment(api, MANUAL)
    api.put(f"/experiments/{exp['key']}/metrics", {"primary": "revenue"})
    declare(api, exp["key"], ["country"])
    exposures, events, country = _data(3)
    seed_rows(api, exp["key"], exposures, events)
    seed_attributes(api, exp["key"], "country", country)
    return {"key": exp["key"], "exposures": exposures, "events": events, "country": country}


def test_slices_match_a_direct_computation_and_add_up(api: Api, experiment: dict[str, Any]) -> None:
    key, exposures, country = experiment["key"], experiment["exposures"], experiment["country"]
    response = api.get(f"/experiments/{key}", params={"dimension": "country", "top": 5})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    split = results["dimension"]
    assert (split["name"], split["top"], split["minUnits"], split["correction"]) == (
        "country",
        5,
        100,
        "holm",
    )
    revenue = _per_unit(exposures, experiment["events"])
    totals: dict[str, int] = defaultdict(int)
    for unit, _ in country.items():
        totals[country[unit]] += 1
    top = sorted(totals, key=lambda c: (-totals[c], c))[:5]

    def slice_of(unit: str) -> str:
        value = country.get(unit)
        return "none" if value is None else value if value in top else "other"

    labels = [s["value"] if s["slice"] == "value" else s["slice"] for s in split["slices"]]
    assert labels == [*top, "other", "none"]
    tested_p: list[float] = []
    tested_at: list[tuple[int, dict[str, Any]]] = []
    for position, piece in enumerate(split["slices"]):
        label = labels[position]
        rows = {
            arm: np.array(
                [revenue[u] for u, a, _ in exposures if a == arm and slice_of(u) == label]
            )
            for arm in ("control", "treatment")
        }
        assert piece["exposed"] == sum(v.size for v in rows.values())
        block = piece["metrics"][0]
        assert block["metric"]["key"] == "revenue"
        by_key = {v["key"]: v for v in block["variants"]}
        for arm, values in rows.items():
            assert by_key[arm]["exposed"] == values.size
            assert by_key[arm]["conversions"] == int((values > 0).sum())
            assert by_key[arm]["rate"] == pytest.approx(values.mean(), rel=TOL)
        assert piece["tested"] is (min(v.size for v in rows.values()) >= 100)
        if piece["tested"]:
            welch = stats.ttest_ind(rows["treatment"], rows["control"], equal_var=False)
            assert by_key["treatment"]["pValue"] == pytest.approx(welch.pvalue, rel=1e-8)
            tested_p.append(float(welch.pvalue))
            tested_at.append((position, by_key["treatment"]))
        else:
            assert "pValue" not in by_key["treatment"]
            assert "fewer than 100" in piece["note"]
    adjusted = holm(tested_p)
    for (_, variant), want in zip(tested_at, adjusted, strict=True):
        assert variant["pValueAdjusted"] == pytest.approx(want, rel=1e-8)
        assert variant["significant"] is (want < 0.05 and variant["differenceCiLow"] > 0)
    # the lift is in C00 alone, and survives the correction there
    first = {v["key"]: v for v in split["slices"][0]["metrics"][0]["variants"]}
    assert split["slices"][0]["value"] == "C00"
    assert first["treatment"]["significant"] is True
    # the slices add up to the totals
    variants = {v["key"]: v for v in results["variants"]}
    for arm in ("control", "treatment"):
        pieces = [{v["key"]: v for v in s["metrics"][0]["variants"]}[arm] for s in split["slices"]]
        assert sum(p["exposed"] for p in pieces) == variants[arm]["exposed"]
        assert sum(p["conversions"] for p in pieces) == variants[arm]["conversions"]
        assert sum(p["rate"] * p["exposed"] for p in pieces) == pytest.approx(
            variants[arm]["rate"] * variants[arm]["exposed"], rel=1e-12
        )


def test_an_event_property_is_a_dimension(api: Api, experiment: dict[str, Any]) -> None:
    """The browser of each unit's first session after its exposure."""
    key, exposures = experiment["key"], experiment["exposures"]
    rng = random.Random(9)
    sessions = []
    first: dict[str, str] = {}
    for unit, _, at in exposures[:2_000]:
        sessions.append((unit, "session", {"browser": "Old"}, at - 5_000))  # before: not read
        for k in range(rng.choice([1, 2])):
            browser = rng.choice(["Firefox", "Chrome", "Safari"])
            sessions.append((unit, "session", {"browser": browser}, at + 10_000 * (k + 1)))
            first.setdefault(unit, browser)
    seed_props(api, sessions)
    response = api.get(
        f"/experiments/{key}", params={"dimension": "event:session:browser", "minUnits": 50}
    )
    assert response.status_code == 200, response.text
    split = response.json()["results"]["dimension"]
    counts = {
        (s["value"] if s["slice"] == "value" else s["slice"]): s["exposed"] for s in split["slices"]
    }
    want: dict[str, int] = defaultdict(int)
    for unit, _, _ in exposures:
        want[first.get(unit, "none")] += 1
    assert counts == dict(want)
    assert "Old" not in counts


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"dimension": "plan"}, "dimension"),
        ({"dimension": "event:session"}, "dimension"),
        ({"dimension": "country", "top": 0}, "top"),
        ({"dimension": "country", "top": 51}, "top"),
        ({"dimension": "country", "minUnits": 1}, "minUnits"),
    ],
)
def test_a_bad_split_names_the_field(
    api: Api, experiment: dict[str, Any], params: dict[str, Any], field: str
) -> None:
    response = api.get(f"/experiments/{experiment['key']}", params=params)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]]


# --- the dimensions an experiment captures, through the API --------------------------------


def slice_counts(api: Api, key: str, dimension: str) -> dict[str, int]:
    """Exposed units per slice (a value, ``other`` or ``none``) of a split."""
    response = api.get(f"/experiments/{key}", params={"dimension": dimension, "minUnits": 2})
    assert response.status_code == 200, response.text
    return {
        (s["value"] if s["slice"] == "value" else s["slice"]): s["exposed"]
        for s in response.json()["results"]["dimension"]["slices"]
    }


def test_dimensions_are_set_checked_and_audited(api: Api) -> None:
    exp = create_experiment(api, {**MANUAL, "dimensions": ["country", "/device/os"]})
    assert exp["dimensions"] == ["country", "/device/os"]
    for body, field in [
        ({"dimensions": ["country", "country"]}, "dimensions[1]"),
        ({"dimensions": ["/a//b"]}, "dimensions[0]"),
        ({"dimensions": [""]}, "dimensions[0]"),
        ({"dimensions": ["key"]}, "dimensions[0]"),
        ({"dimensions": [f"d{i}" for i in range(11)]}, "dimensions"),
    ]:
        refused = api.patch(f"/experiments/{exp['key']}", body)
        assert refused.status_code == 422, refused.text
        assert [d["field"] for d in refused.json()["error"]["details"]] == [field]
        created = api.post("/experiments", {**MANUAL, **body})
        assert created.status_code == 422, created.text
        assert [d["field"] for d in created.json()["error"]["details"]] == [field]
    changed = api.patch(f"/experiments/{exp['key']}", {"dimensions": ["plan"]})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["dimensions"], changed.json()["version"]) == (
        ["plan"],
        exp["version"] + 1,
    )
    audit = api.get("/audit", params={"resourceType": "experiment"}).json()["entries"]
    update = next(e for e in audit if e["action"] == "experiment.update")
    assert update["before"]["dimensions"] == ["country", "/device/os"]
    assert update["after"]["dimensions"] == ["plan"]


def test_assign_and_exposure_claims_capture_the_declared_dimensions(api: Api) -> None:
    """The assign endpoint reads them from the context it is given (references into nested
    objects; numbers and booleans as text); a backend's ``$exposure`` claim carries them in
    ``props.dimensions``; only the experiment's own dimensions are kept, the first value wins."""
    exp = create_experiment(api, {**MANUAL, "dimensions": ["country", "/device/os", "beta"]})
    key = exp["key"]
    contexts = {
        "a1": {"targetingKey": "a1", "country": "DE", "device": {"os": "ios"}, "beta": True},
        "a2": {"targetingKey": "a2", "country": "DE", "device": {"os": "android"}},
        "a3": {"targetingKey": "a3", "country": "FR", "plan": "pro"},
        "a4": {"targetingKey": "a4"},
        "a5": {"kind": "multi", "user": {"key": "a5", "country": "FR"}, "org": {"key": "o"}},
    }
    for unit, context in contexts.items():
        answer = api.post(f"/experiments/{key}/assign", {"unit": unit, "context": context})
        assert answer.status_code == 200, answer.text
        assert answer.json()["assigned"] is True
    # a repeat with another value changes nothing: the first value wins
    again = {"unit": "a1", "context": {"targetingKey": "a1", "country": "US"}}
    assert api.post(f"/experiments/{key}/assign", again).status_code == 200
    variant = {u: api.post(f"/experiments/{key}/assign", {"unit": u}).json() for u in ("b1", "b2")}
    claims = [
        {
            "unit": unit,
            "event": "$exposure",
            "props": {
                "experiment": key,
                "variant": variant[unit]["variant"],
                "dimensions": {"country": country, "undeclared": "x"},
            },
        }
        for unit, country in (("b1", "IT"), ("b2", "DE"))
    ]
    stored = api.post("/events", {"events": claims}, key=api.keys["server"])
    assert stored.status_code == 200, stored.text
    assert slice_counts(api, key, "country") == {"DE": 3, "FR": 2, "IT": 1, "none": 1}
    assert slice_counts(api, key, "/device/os") == {"android": 1, "ios": 1, "none": 5}
    assert slice_counts(api, key, "beta") == {"true": 1, "none": 6}


def test_a_private_attribute_is_never_captured(api: Api) -> None:
    exp = create_experiment(api, {**MANUAL, "dimensions": ["country", "email"]})
    made = api.post(
        "/keys", {"kind": "server", "environment": "production", "privateAttributes": ["email"]}
    )
    assert made.status_code == 201, made.text
    server = made.json()["key"]
    context = {"targetingKey": "p1", "country": "DE", "email": "p1@x.example"}
    answer = api.post(
        f"/experiments/{exp['key']}/assign", {"unit": "p1", "context": context}, key=server
    )
    assert answer.status_code == 200, answer.text
    variant = api.post(f"/experiments/{exp['key']}/assign", {"unit": "p2"}).json()["variant"]
    claim = {
        "unit": "p2",
        "event": "$exposure",
        "props": {
            "experiment": exp["key"],
            "variant": variant,
            "dimensions": {"country": "FR", "email": "p2@x.example"},
        },
    }
    assert api.post("/events", {"events": [claim]}, key=server).status_code == 200
    assert slice_counts(api, exp["key"], "email") == {"none": 2}
    assert slice_counts(api, exp["key"], "country") == {"DE": 1, "FR": 1}
    stored = api.get("/events", params={"unit": "p2"}).json()["events"]
    assert "p2@x.example" not in str(stored)


def test_the_time_series_of_a_slice_ends_at_its_results(
    api: Api, experiment: dict[str, Any]
) -> None:
    """A slice's series ends where the split results stand: its units, conversions and rates;
    the series of all the slices add up to the whole experiment's."""
    key = experiment["key"]
    split = api.get(f"/experiments/{key}", params={"dimension": "country", "top": 5}).json()
    whole = api.get(f"/experiments/{key}/timeseries").json()["days"][-1]["variants"]
    added: dict[str, int] = defaultdict(int)
    for piece in split["results"]["dimension"]["slices"]:
        params: dict[str, Any] = {"dimension": "country", "top": 5}
        if piece["slice"] == "value":
            params["value"] = piece["value"]
        else:
            params["slice"] = piece["slice"]
        response = api.get(f"/experiments/{key}/timeseries", params=params)
        assert response.status_code == 200, response.text
        series = response.json()
        assert series["slice"] == {
            "dimension": "country",
            "value": piece["value"],
            "slice": piece["slice"],
        }
        last = {v["key"]: v for v in series["days"][-1]["variants"]}
        for variant in piece["metrics"][0]["variants"]:
            assert last[variant["key"]]["exposed"] == variant["exposed"]
            assert last[variant["key"]]["conversions"] == variant["conversions"]
            assert last[variant["key"]]["rate"] == pytest.approx(variant["rate"], rel=1e-9)
            added[variant["key"]] += variant["exposed"]
    assert added == {v["key"]: v["exposed"] for v in whole}
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"dimension": "country"}, "value"),
        ({"dimension": "country", "value": "C00", "slice": "none"}, "value"),
        ({"dimension": "country", "top": 2, "value": "C07"}, "value"),
        ({"dimension": "country", "slice": "all"}, "slice"),
        ({"value": "C00"}, "dimension"),
        ({"dimension": "plan", "value": "x"}, "dimension"),
    ]
    for params, field in refusals:
        refused = api.get(f"/experiments/{key}/timeseries", params=params)
        assert refused.status_code == 422, refused.text
        assert field in [d["field"] for d in refused.json()["error"]["details"]]


def test_a_dimension_no_name_can_hold_is_refused_not_sent_to_the_database(
    api: Api, experiment: dict[str, Any]
) -> None:
    for dimension in ("event:pur\x00chase:browser", "event:purchase:br\x00owser", "x" * 501):
        for path in ("", "/timeseries"):
            params = {"dimension": dimension, "value": "x"}
            response = api.get(f"/experiments/{experiment['key']}{path}", params=params)
            assert response.status_code == 422, response.text
            assert response.json()["error"]["details"][0]["field"] == "dimension"
