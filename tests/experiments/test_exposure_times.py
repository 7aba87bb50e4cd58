"""When an exposure an event claims counts from, over HTTP: from the event's ``ts``, but never
before the experiment's start (an exposure stamped earlier counts from the start), and never one
stamped after its stop (a relay's spooled exposure arriving late is judged by its ``ts``, not by
when it arrives)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Api
from tests.experiments.seed import backdate, create_experiment
from tests.variants import variant_of

MANUAL = {"name": "Checkout", "type": "manual", "goal": "purchase"}
DAY_MS = 24 * 3600 * 1000


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def unit_in(exp: dict[str, Any], variant: str) -> str:
    keys = [v["key"] for v in exp["variants"]]
    weights = [v.get("weight") for v in exp["variants"]]
    return next(
        unit
        for unit in (f"unit-{i}" for i in range(1_000))
        if variant_of(exp["key"], unit, keys, weights) == variant
    )


def exposure(exp: dict[str, Any], unit: str, variant: str, ts: int) -> dict[str, Any]:
    return {
        "unit": unit,
        "event": "$exposure",
        "ts": ts,
        "props": {"experiment": exp["key"], "variant": variant},
        "eventId": f"exp:{exp['key']}:{unit}",
    }


def arm(api: Api, key: str, variant: str) -> dict[str, Any]:
    response = api.get(f"/experiments/{key}")
    assert response.status_code == 200, response.text
    found = response.json()["results"]["variants"]
    return next(v for v in found if v["key"] == variant)


@pytest.mark.parametrize("sender", ["server", "relay"])
def test_an_exposure_stamped_before_the_start_counts_from_the_start(api: Api, sender: str) -> None:
    # found from outside: a backend's exposure stamped three days before the start made every
    # event since then count, and the results' first day three days before the experiment's
    exp = create_experiment(api, MANUAL)
    start = ms(datetime.fromisoformat(exp["startedAt"]))
    unit = unit_in(exp, "treatment")
    key = api.keys[sender]
    early_purchase = {"unit": unit, "event": "purchase", "ts": start - 2 * DAY_MS, "eventId": "p1"}
    claimed = exposure(exp, unit, "treatment", start - 3 * DAY_MS)
    sent = api.post("/events", {"events": [early_purchase, claimed]}, key=key)
    assert sent.status_code in (200, 202), sent.text
    assert sent.json()["accepted"] == 2  # the events are stored as sent
    treatment = arm(api, exp["key"], "treatment")
    assert (treatment["exposed"], treatment["conversions"]) == (1, 0)
    days = api.get(f"/experiments/{exp['key']}/timeseries").json()["days"]
    assert [day["date"] for day in days] == [exp["startedAt"][:10]]

    purchase = {"unit": unit, "event": "purchase", "eventId": "p2"}
    assert api.post("/events", {"events": [purchase]}, key=key).json()["accepted"] == 1
    treatment = arm(api, exp["key"], "treatment")
    assert (treatment["exposed"], treatment["conversions"]) == (1, 1)


def test_a_relay_exposure_stamped_after_the_stop_is_left_out_however_late_it_arrives(
    api: Api,
) -> None:
    exp = create_experiment(api, MANUAL)
    stopped = api.post(f"/experiments/{exp['key']}", {"status": "stopped"})
    assert stopped.status_code == 200, stopped.text
    _, stop = backdate(api, exp["key"], started=timedelta(days=1), stopped=timedelta(hours=1))
    assert stop is not None
    before_stop = exposure(exp, "spooled", "control", ms(stop - timedelta(hours=1)))
    after_stop = exposure(exp, "too-late", "control", ms(stop + timedelta(minutes=30)))
    relay = api.keys["relay"]
    answer = api.post("/events", {"events": [before_stop, after_stop]}, key=relay)
    assert answer.json() == {"accepted": 1, "duplicates": 0, "conflicts": 0}
    assert api.get(f"/experiments/{exp['key']}").json()["exposed"] == 1
    assert arm(api, exp["key"], "control")["exposed"] == 1
    again = api.post("/events", {"events": [after_stop]}, key=relay)  # a redelivery: the same
    assert again.json() == {"accepted": 0, "duplicates": 0, "conflicts": 0}
    assert api.get(f"/experiments/{exp['key']}").json()["exposed"] == 1


def test_a_holdout_exposure_is_held_to_the_holdout_s_run_alike(api: Api) -> None:
    made = api.post(
        "/metrics", {"key": "buy", "name": "Buy", "event": "purchase", "aggregation": "conversion"}
    )
    assert made.status_code == 201, made.text
    holdout = api.post("/holdouts", {"name": "Q4", "key": "q4", "share": 0.2, "metrics": ["buy"]})
    assert holdout.status_code == 201, holdout.text
    start = ms(datetime.fromisoformat(holdout.json()["startedAt"]))
    relay = api.keys["relay"]

    def held(unit: str, ts: int) -> dict[str, Any]:
        props = {"holdout": "q4", "group": "holdout"}
        return {"unit": unit, "event": "$exposure", "ts": ts, "props": props, "eventId": unit}

    early = {"unit": "early", "event": "purchase", "ts": start - DAY_MS, "eventId": "p-early"}
    sent = api.post("/events", {"events": [early, held("early", start - 3 * DAY_MS)]}, key=relay)
    assert sent.json()["accepted"] == 2
    results = api.get("/holdouts/q4/results").json()["results"]
    group = next(v for v in results["variants"] if v["key"] == "holdout")
    assert (group["exposed"], group["conversions"]) == (1, 0)

    assert api.patch("/holdouts/q4", {"status": "stopped"}).status_code == 200
    stopped = ms(datetime.fromisoformat(api.get("/holdouts/q4").json()["stoppedAt"]))
    late = api.post("/events", {"events": [held("late", stopped + 60_000)]}, key=relay)
    assert late.json()["accepted"] == 0
    assert api.get("/holdouts/q4").json()["exposed"] == {"holdout": 1, "general": 0}
