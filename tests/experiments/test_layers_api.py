"""Layers and holdouts over HTTP at the control plane: validation, ranges taken at start and
freed at stop, the assign endpoint's placements (checked unit by unit against a direct
computation), refused exposure claims, and a holdout's results."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine.bucketing import WEIGHT_SCALE, experiment_bucket, holdout_bucket, layer_bucket
from tests.conftest import Api

MANUAL = {"type": "manual", "goal": "purchase"}


def created(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(path, body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


def in_range(layer: str, unit: str, start: float, end: float) -> bool:
    return start * WEIGHT_SCALE <= layer_bucket(layer, unit) < end * WEIGHT_SCALE


def variant(experiment: str, unit: str) -> str:
    return "control" if experiment_bucket(experiment, unit) < WEIGHT_SCALE // 2 else "treatment"


def test_layers_crud_and_references(api: Api) -> None:
    layer = created(api, "/layers", {"name": "Checkout", "key": "checkout"})
    assert layer["running"] == []
    assert layer["free"] == 1.0
    assert api.post("/layers", {"name": "Again", "key": "checkout"}).status_code == 409
    assert fields(api.post("/layers", {"name": "", "key": "Bad Key"})) == ["name", "key"]
    renamed = api.patch("/layers/checkout", {"description": "the checkout page"})
    assert renamed.status_code == 200
    assert renamed.json()["version"] == 2
    assert (
        api.client.get(  # mounted under /v1 as every route is
            "/v1/layers/checkout", headers={"Authorization": f"Bearer {api.keys['management']}"}
        ).json()["description"]
        == "the checkout page"
    )
    created(api, "/experiments", {**MANUAL, "name": "A", "layer": "checkout", "traffic": 0.4})
    refused = api.delete("/layers/checkout")
    assert refused.status_code == 409
    assert "experiment 'a'" in refused.json()["error"]["message"]
    assert api.get("/layers").json()["count"] == 1
    audit = api.get("/audit?resourceType=layer").json()
    assert {e["action"] for e in audit["entries"]} >= {"layer.create", "layer.update"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"layer": "nope"}, "layer"),
        ({"layer": "l", "traffic": 0}, "traffic"),
        ({"layer": "l", "traffic": -0.5}, "traffic"),
        ({"layer": "l", "traffic": 1.5}, "traffic"),
        ({"layer": "l", "traffic": 0.000001}, "traffic"),
        ({"traffic": 0.5}, "traffic"),
        ({"layer": "l", "traffic": "half"}, "traffic"),
        ({"layer": 3}, "layer"),
    ],
)
def test_bad_layer_or_traffic_is_422_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    created(api, "/layers", {"name": "L", "key": "l"})
    answer = api.post("/experiments", {**MANUAL, "name": "X", **body})
    assert answer.status_code == 422, answer.text
    assert fields(answer) == [field]


def test_ranges_are_taken_at_start_never_overlap_and_are_freed_at_stop(api: Api) -> None:
    created(api, "/layers", {"name": "L", "key": "l"})
    a = created(api, "/experiments", {**MANUAL, "name": "A", "layer": "l", "traffic": 0.5})
    b = created(api, "/experiments", {**MANUAL, "name": "B", "layer": "l", "traffic": 0.3})
    assert (a["layer"], a["traffic"], a["range"]) == ("l", 0.5, {"start": 0.0, "end": 0.5})
    assert b["range"] == {"start": 0.5, "end": 0.8}
    # no gap large enough: 409 naming traffic, saying what is free
    full = api.post("/experiments", {**MANUAL, "name": "C", "layer": "l", "traffic": 0.3})
    assert full.status_code == 409, full.text
    assert fields(full) == ["traffic"]
    assert "largest free range is 20 %" in full.json()["error"]["message"]
    # a draft holds nothing; it takes the lowest free range when it starts
    c = created(
        api,
        "/experiments",
        {**MANUAL, "name": "C", "layer": "l", "traffic": 0.5, "activate": False},
    )
    assert c["range"] is None
    assert api.post("/experiments/c", {"status": "running"}).status_code == 409
    assert api.post("/experiments/a", {"status": "stopped"}).status_code == 200
    # freed traffic goes to an experiment started later: C takes A's range
    started = api.post("/experiments/c", {"status": "running"})
    assert started.status_code == 200, started.text
    assert started.json()["range"] == {"start": 0.0, "end": 0.5}
    # B, running all along, kept its range; A cannot restart on a range now held by C
    assert api.get("/experiments/b").json()["range"] == {"start": 0.5, "end": 0.8}
    restart = api.post("/experiments/a", {"status": "running"})
    assert restart.status_code == 409
    assert fields(restart) == ["traffic"]
    layer = api.get("/layers/l").json()
    assert [(s["experiment"], s["start"], s["end"]) for s in layer["running"]] == [
        ("c", 0.0, 0.5),
        ("b", 0.5, 0.8),
    ]
    assert layer["free"] == pytest.approx(0.2)
    # layer and traffic change only while a draft
    moved = api.patch("/experiments/b", {"traffic": 0.1})
    assert moved.status_code == 409
    draft = created(api, "/experiments", {**MANUAL, "name": "D", "activate": False})
    patched = api.patch("/experiments/d", {"layer": "l", "traffic": 0.2})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["layer"], patched.json()["traffic"]) == ("l", 0.2)
    assert draft["layer"] is None
    assert fields(api.patch("/experiments/d", {"traffic": 2})) == ["traffic"]
    assert api.post("/experiments/d", {"status": "running"}).json()["range"] == {
        "start": 0.8,
        "end": 1.0,
    }


def test_assign_places_units_by_layer_range_unit_by_unit(api: Api) -> None:
    """A stopped experiment's units are not in one started before it stopped (B never overlaps
    A), and the assign endpoint agrees with the layer bucket for 400 units (twice each)."""
    created(api, "/layers", {"name": "L", "key": "l"})
    created(api, "/experiments", {**MANUAL, "name": "A", "layer": "l", "traffic": 0.3})
    created(api, "/experiments", {**MANUAL, "name": "B", "layer": "l", "traffic": 0.3})
    api.post("/experiments/a", {"status": "stopped"})
    created(api, "/experiments", {**MANUAL, "name": "C", "layer": "l", "traffic": 0.2})
    ranges = {"b": (0.3, 0.6), "c": (0.0, 0.2)}
    in_any = dict.fromkeys(ranges, 0)
    for i in range(400):
        unit = f"u{i}"
        inside = []
        for key, (start, end) in ranges.items():
            answer = api.post(f"/experiments/{key}/assign", {"unit": unit}).json()
            expected = in_range("l", unit, start, end)
            assert answer["assigned"] is expected, (key, unit, answer)
            if expected:
                assert answer["variant"] == variant(key, unit)
                inside.append(key)
                in_any[key] += 1
            else:
                assert answer["variant"] == "control"
                assert answer["reason"] == "not in the experiment's share of layer l"
        assert len(inside) <= 1
    assert 55 < in_any["c"] < 105  # 20 % of 400, within three standard deviations
    assert 92 < in_any["b"] < 148  # 30 %
    # only the units in the range were exposed
    assert api.get("/experiments/b").json()["exposed"] == in_any["b"]
    # a backend's claim for a unit outside the range is refused, naming the experiment
    outside = next(f"u{i}" for i in range(1000) if not in_range("l", f"u{i}", 0.3, 0.6))
    claim = {
        "unit": outside,
        "event": "$exposure",
        "props": {"experiment": "b", "variant": "control"},
    }
    refused = api.post("/events", {"events": [claim]}, key=api.keys["server"])
    assert refused.status_code == 422, refused.text
    assert fields(refused) == ["events[0].props.experiment"]


def metric(api: Api, key: str, event: str) -> None:
    created(api, "/metrics", {"key": key, "name": key, "event": event, "aggregation": "conversion"})


def held(holdout: str, unit: str, share: float) -> bool:
    return holdout_bucket(holdout, unit) < share * WEIGHT_SCALE


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"share": 0}, "share"),
        ({"share": 1}, "share"),
        ({"share": 1.2}, "share"),
        ({"layer": "nope"}, "layer"),
        ({"metrics": []}, "metrics"),
        ({"metrics": ["unknown"]}, "metrics[0]"),
        ({"metrics": ["buy", "buy"]}, "metrics[1]"),
        ({"share": "5%"}, "share"),
    ],
)
def test_bad_holdouts_are_422_naming_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    metric(api, "buy", "purchase")
    answer = api.post("/holdouts", {"name": "H", "share": 0.05, "metrics": ["buy"], **body})
    assert answer.status_code == 422, answer.text
    assert fields(answer) == [field]


def test_held_out_units_get_the_control_and_results_count_each_group(api: Api) -> None:
    metric(api, "buy", "purchase")
    created(api, "/layers", {"name": "L", "key": "l"})
    hold = created(api, "/holdouts", {"name": "Q4", "key": "q4", "share": 0.2, "metrics": ["buy"]})
    assert (hold["status"], hold["share"], hold["layer"], hold["metrics"]) == (
        "running",
        0.2,
        None,
        ["buy"],
    )
    lay = created(
        api,
        "/holdouts",
        {"name": "L only", "key": "lh", "share": 0.1, "layer": "l", "metrics": ["buy"]},
    )
    created(api, "/experiments", {**MANUAL, "name": "Free"})  # no layer: q4 only
    created(api, "/experiments", {**MANUAL, "name": "In L", "layer": "l", "traffic": 0.5})
    units = [f"v{i}" for i in range(600)]
    general: set[str] = set()
    holdout: set[str] = set()
    for unit in units:
        answer = api.post("/experiments/free/assign", {"unit": unit}).json()
        if held("q4", unit, 0.2):
            assert answer == {
                "experiment": "free",
                "variant": "control",
                "assigned": False,
                "reason": "held out by holdout q4: served the control",
                "content": "",
            }
            holdout.add(unit)
        else:
            assert answer["assigned"] is True
            assert answer["variant"] == variant("free", unit)
            general.add(unit)
        in_l = api.post("/experiments/in-l/assign", {"unit": unit}).json()
        if not in_range("l", unit, 0, 0.5):
            assert in_l["assigned"] is False
            assert "share of layer l" in in_l["reason"]
        elif held("q4", unit, 0.2) or held("lh", unit, 0.1):
            assert in_l["assigned"] is False
            assert in_l["variant"] == "control"
        else:
            assert in_l["assigned"] is True
    # never exposed to the experiment: its exposed count leaves them out
    assert api.get("/experiments/free").json()["exposed"] == len(general)
    # a backend may not claim a treatment (or any variant) for a held-out unit
    out = next(u for u in units if held("q4", u, 0.2) and variant("free", u) == "treatment")
    claim = {
        "unit": out,
        "event": "$exposure",
        "props": {"experiment": "free", "variant": "treatment"},
    }
    refused = api.post("/events", {"events": [claim]}, key=api.keys["server"])
    assert refused.status_code == 422
    assert fields(refused) == ["events[0].props.experiment"]
    assert "held out by holdout q4" in refused.json()["error"]["message"]
    # nor a wrong group of the holdout; the right one is accepted (and counted once)
    wrong = {"unit": out, "event": "$exposure", "props": {"holdout": "q4", "group": "general"}}
    claimed = api.post("/events", {"events": [wrong]}, key=api.keys["server"])
    assert fields(claimed) == ["events[0].props.group"]
    right = {"unit": out, "event": "$exposure", "props": {"holdout": "q4", "group": "holdout"}}
    assert api.post("/events", {"events": [right]}, key=api.keys["server"]).status_code == 200
    # conversions: every third general unit, every fifth held-out one
    buyers = sorted(general)[::3] + sorted(holdout)[::5]
    events = [{"unit": u, "event": "purchase"} for u in buyers]
    assert api.post("/events", {"events": events}, key=api.keys["server"]).status_code == 200
    got = api.get("/holdouts/q4/results").json()
    assert got["holdout"]["exposed"] == {"holdout": len(holdout), "general": len(general)}
    variants = {v["key"]: v for v in got["results"]["variants"]}
    assert got["results"]["control"] == "holdout"
    assert variants["holdout"]["exposed"] == len(holdout)
    assert variants["general"]["exposed"] == len(general)
    assert variants["holdout"]["conversions"] == len(sorted(holdout)[::5])
    assert variants["general"]["conversions"] == len(sorted(general)[::3])
    # the layer's holdout saw only units that reached its layer's experiment's range
    reached = [u for u in units if in_range("l", u, 0, 0.5)]
    lh = api.get(f"/holdouts/{lay['key']}").json()["exposed"]
    assert lh == {
        "holdout": sum(held("lh", u, 0.1) for u in reached),
        "general": sum(not held("lh", u, 0.1) for u in reached),
    }
    # stopping releases the units; a running holdout cannot be deleted
    assert api.delete("/holdouts/q4").status_code == 409
    stopped = api.patch("/holdouts/q4", {"status": "stopped"})
    assert stopped.status_code == 200
    assert stopped.json()["status"] == "stopped"
    assert api.post("/experiments/free/assign", {"unit": out}).json()["assigned"] is True
    assert api.delete("/layers/l").status_code == 409  # the layer's holdout and experiment
    assert api.delete("/holdouts/q4").json()["deleted"] is True
