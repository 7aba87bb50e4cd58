"""Layers and holdouts through real processes: a control plane and a relay agree unit by unit
(the relay's page list, selectors and assign against the control plane's assign), a page's unit
outside an experiment's share of its layer sees no variant, held-out units see the control and
are never exposed to a treatment, and the relay's exposures reach the holdout's counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shared.engine.bucketing import WEIGHT_SCALE, holdout_bucket, layer_bucket
from tests.e2e.test_relays import eventually, start_control_plane, start_relay
from tests.e2e.test_untrusted import ORIGIN, Site

pytestmark = pytest.mark.e2e

UNITS = [f"visitor-{i}" for i in range(2_000)]
TWO = [{"key": "control", "content": ""}, {"key": "treatment", "content": "New"}]
SHARE = 0.2


def held(unit: str) -> bool:
    return holdout_bucket("q4", unit) < SHARE * WEIGHT_SCALE


def in_first_half(unit: str) -> bool:
    return layer_bucket("hero", unit) < WEIGHT_SCALE // 2


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("layers")
    cp = start_control_plane(f"sqlite:///{tmp / 'vane.db'}", tmp)
    relay = start_relay(cp.url, cp.keys["relay"], tmp / "relay")
    site = Site(cp, relay)
    try:
        assert site.api("POST", "/layers", {"name": "Hero", "key": "hero"}).status_code == 201
        metric = {"key": "buy", "name": "Buy", "event": "buy", "aggregation": "conversion"}
        assert site.api("POST", "/metrics", metric).status_code == 201
        holdout = {"name": "Q4", "key": "q4", "share": SHARE, "metrics": ["buy"]}
        assert site.api("POST", "/holdouts", holdout).status_code == 201
        for key in ("headline", "subline"):
            site.experiment(
                {
                    "name": key,
                    "key": key,
                    "type": "element",
                    "selector": f"#{key}",
                    "variants": TWO,
                    "layer": "hero",
                    "traffic": 0.5,
                }
            )
        site.relay_current()
        yield site
    finally:
        relay.process.stop()
        cp.process.stop()


def cp_assign(site: Site, key: str, unit: str) -> dict[str, Any]:
    answer = site.api("POST", f"/experiments/{key}/assign", {"unit": unit, "url": "/"})
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_relay_and_control_plane_agree_unit_by_unit(site: Site) -> None:
    ranges = {e["key"]: e["range"] for e in site.api("GET", "/experiments").json()["experiments"]}
    assert ranges == {"headline": {"start": 0.0, "end": 0.5}, "subline": {"start": 0.5, "end": 1.0}}
    listed_in: dict[str, int] = {"headline": 0, "subline": 0}
    with httpx.Client(timeout=10) as client:
        headers = {**site.auth("public"), **ORIGIN}
        for unit in UNITS:
            page = client.post(
                f"{site.relay.url}/sdk/v1/experiments",
                json={"unit": unit, "url": "/", "expose": False},
                headers=headers,
            )
            assert page.status_code == 200, page.text
            shown = {x["key"]: x["variant"] for x in page.json()["experiments"]}
            # a unit is in exactly one experiment of the layer (the two fill it)
            assert list(shown) == (["headline"] if in_first_half(unit) else ["subline"])
            for key, variant in shown.items():
                listed_in[key] += 1
                if held(unit):
                    assert variant == "control"
            if int(unit.rsplit("-", 1)[1]) % 10 == 0:  # the assign endpoints, on a tenth
                for key in ("headline", "subline"):
                    at_cp = cp_assign(site, key, unit)
                    at_relay = client.post(
                        f"{site.relay.url}/sdk/v1/experiments/{key}/assign",
                        json={"unit": unit, "url": "/"},
                        headers=headers,
                    ).json()
                    assert at_relay == at_cp, unit
                    assert at_cp["assigned"] is (key in shown and not held(unit))
                    if key in shown:
                        assert at_cp["variant"] == shown[key]
    for count in listed_in.values():
        assert abs(count / len(UNITS) - 0.5) < 0.05


def test_a_page_outside_the_range_sees_no_variant(site: Site) -> None:
    """The tracker renders what the relay lists: the synchronous selectors call lists only the
    experiment whose range holds the unit."""
    unit = next(u for u in UNITS if not in_first_half(u) and not held(u))
    answer = httpx.get(
        f"{site.relay.url}/sdk/v1/selectors",
        params={"key": site.keys["public"], "url": "/", "unit": unit},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert sorted(answer.json()["selectors"]) == ["#headline", "#subline"]
    assert [x["key"] for x in answer.json()["experiments"]] == ["subline"]


def test_held_out_units_are_never_exposed_to_a_treatment_at_the_relay(site: Site) -> None:
    fresh = [f"fresh-{i}" for i in range(300)]
    headers = {**site.auth("public"), **ORIGIN}
    for unit in fresh:  # a page that shows its experiments: exposures through the relay only
        page = httpx.post(
            f"{site.relay.url}/sdk/v1/experiments",
            json={"unit": unit, "url": "/"},
            headers=headers,
            timeout=10,
        )
        assert page.status_code == 200
    # a backend's claim of a treatment for a held-out unit is refused at the relay
    out = next(u for u in fresh if held(u) and in_first_half(u))
    claim = {
        "unit": out,
        "event": "$exposure",
        "props": {"experiment": "headline", "variant": "treatment"},
    }
    refused = httpx.post(
        f"{site.relay.url}/api/v1/events",
        json={"events": [claim]},
        headers=site.auth("server"),
        timeout=10,
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"][0]["field"] == "events[0].props.experiment"
    # earlier tests exposed the tenth of UNITS the assign endpoints saw (both paths, once)
    seen = [u for i, u in enumerate(UNITS) if i % 10 == 0] + fresh
    expected = {
        "holdout": sum(held(u) for u in seen),
        "general": sum(not held(u) for u in seen),
    }

    def counts() -> dict[str, int]:
        return site.api("GET", "/holdouts/q4").json()["exposed"]  # type: ignore[no-any-return]

    eventually(lambda: counts() == expected, what=lambda: f"{counts()} != {expected}")
    exposed = sum(
        site.api("GET", f"/experiments/{k}").json()["exposed"] for k in ("headline", "subline")
    )
    assert exposed == expected["general"]  # held-out units never exposed to an experiment
    results = site.api("GET", "/holdouts/q4/results").json()["results"]
    assert {v["key"]: v["exposed"] for v in results["variants"]} == expected
