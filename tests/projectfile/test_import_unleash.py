"""Unleash's feature export imported through plan and apply (issue #36): strategies as rules
serving true, constraints and segments as clauses, a gradual rollout as a rollout; evaluated
through the API; what has no equivalent named, what cannot be converted refused."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.domain.projectfile.imports import Refused, unleash
from tests.conftest import Api
from tests.projectfile.conftest import apply, export, ok

EXPORT: dict[str, Any] = {
    "features": [
        {
            "name": "NewCheckout",
            "type": "release",
            "description": "the new checkout",
            "impressionData": True,
        },
        {"name": "dark-mode", "type": "permission"},
        {"name": "always", "type": "release"},
        {"name": "dormant", "type": "release"},
    ],
    "featureStrategies": [
        {
            "featureName": "NewCheckout",
            "environment": "production",
            "name": "flexibleRollout",
            "parameters": {"rollout": "30", "stickiness": "default", "groupId": "NewCheckout"},
            "constraints": [],
            "sortOrder": 0,
        },
        {
            "featureName": "NewCheckout",
            "environment": "production",
            "name": "default",
            "constraints": [
                {"contextName": "country", "operator": "IN", "values": ["DE", "NL"]},
                {"contextName": "age", "operator": "NUM_GTE", "value": "18"},
            ],
            "segments": [7],
            "sortOrder": 1,
        },
        {
            "featureName": "NewCheckout",
            "environment": "staging",
            "name": "default",
            "constraints": [],
        },
        {
            "featureName": "dark-mode",
            "environment": "production",
            "name": "userWithId",
            "parameters": {"userIds": "ann, bob"},
            "variants": [{"name": "blue", "weight": 1000}],
        },
    ],
    "featureEnvironments": [
        {"featureName": "NewCheckout", "environment": "production", "enabled": True},
        {"featureName": "dark-mode", "environment": "production", "enabled": True},
        {"featureName": "always", "environment": "production", "enabled": True},
        {"featureName": "dormant", "environment": "production", "enabled": False},
    ],
    "segments": [
        {
            "id": 7,
            "name": "app-users",
            "constraints": [
                {"contextName": "appVersion", "operator": "SEMVER_GT", "value": "2.0.0"}
            ],
        }
    ],
}


def value(api: Api, flag: str, context: dict[str, Any]) -> Any:
    answer = ok(api.post(f"/flags/{flag}/environments/production/evaluate", {"context": context}))
    return answer["value"]


def test_an_unleash_export_imports_and_serves_what_unleash_would(api: Api) -> None:
    converted = unleash.convert(EXPORT, "production")
    assert (
        "feature NewCheckout: imported as newcheckout (Vane's keys are lowercase)"
        in converted.notes
    )
    assert "feature NewCheckout: impressionData (no Vane equivalent)" in converted.notes
    assert apply(api, converted.document)["applied"] is True
    matching = {"key": "u1", "country": "DE", "age": 30, "appVersion": "2.1.0"}
    assert value(api, "newcheckout", matching) is True
    for outside in ({**matching, "appVersion": "1.0.0"}, {**matching, "age": 17}):
        path = "/flags/newcheckout/environments/production/evaluate"
        assert ok(api.post(path, {"context": outside}))["reason"] == "FALLTHROUGH"  # the rollout
    rolled = [value(api, "newcheckout", {"key": f"k{i}"}) for i in range(300)]
    assert 0.18 < rolled.count(True) / 300 < 0.42  # 30 percent: bucketing differs, shares not
    # a feature with variants serves what Unleash's getVariant returns
    assert value(api, "dark-mode", {"key": "bob"}) == {"name": "blue", "enabled": True}
    assert value(api, "dark-mode", {"key": "carl"}) == {"name": "disabled", "enabled": False}
    assert value(api, "always", {"key": "x"}) is True  # enabled, no strategy: on
    assert value(api, "dormant", {"key": "x"}) is False
    live = export(api)
    setting = next(f for f in live["flags"] if f["key"] == "newcheckout")["environments"][
        "production"
    ]
    # the certain strategy first (an "or" keeps its meaning), the rollout for everyone else
    assert [r["serve"] for r in setting["rules"]] == [{"variation": 0}]
    assert setting["fallthrough"] == {
        "rollout": [{"idx": 0, "weight": 30}, {"idx": 1, "weight": 70}]
    }
    assert apply(api, converted.document)["applied"] is False


@pytest.mark.parametrize(
    ("strategy", "construct"),
    [
        (
            {"name": "remoteAddress", "parameters": {"IPs": "1.2.3.4"}},
            "the strategy 'remoteAddress'",
        ),
        (
            {
                "name": "default",
                "constraints": [{"contextName": "x", "operator": "REGEX", "values": []}],
            },
            "constraint operator 'REGEX'",
        ),
        (
            {
                "name": "default",
                "constraints": [
                    {"contextName": "x", "operator": "IN", "values": ["a"], "caseInsensitive": True}
                ],
            },
            "case-insensitive IN",
        ),
        (
            {"name": "flexibleRollout", "parameters": {"rollout": "50", "stickiness": "random"}},
            "random stickiness",
        ),
    ],
)
def test_what_cannot_be_converted_is_refused_naming_the_feature(
    strategy: Any, construct: str
) -> None:
    data = {
        "features": [{"name": "f"}],
        "featureStrategies": [{"featureName": "f", "environment": "production", **strategy}],
        "featureEnvironments": [{"featureName": "f", "environment": "production", "enabled": True}],
    }
    with pytest.raises(Refused) as refused:
        unleash.convert(data, "production")
    assert refused.value.where.startswith("feature f strategy")
    assert construct in refused.value.construct


VARIANTS: dict[str, Any] = {
    "features": [{"name": "theme", "type": "experiment"}, {"name": "banner", "type": "release"}],
    "featureStrategies": [
        {  # half the units get the feature; among them, the variants by weight
            "featureName": "theme",
            "environment": "production",
            "name": "flexibleRollout",
            "parameters": {"rollout": "50", "stickiness": "default", "groupId": "theme"},
            "constraints": [],
        },
        {  # a strategy with variants of its own, for the beta testers
            "featureName": "banner",
            "environment": "production",
            "name": "default",
            "constraints": [{"contextName": "beta", "operator": "IN", "values": ["yes"]}],
            "variants": [
                {
                    "name": "loud",
                    "weight": 1000,
                    "weightType": "variable",
                    "stickiness": "default",
                    "payload": {"type": "string", "value": "LOUD"},
                }
            ],
        },
        {"featureName": "banner", "environment": "production", "name": "default"},
    ],
    "featureEnvironments": [
        {
            "featureName": "theme",
            "environment": "production",
            "enabled": True,
            "variants": [
                {
                    "name": "dark",
                    "weight": 750,
                    "weightType": "variable",
                    "stickiness": "default",
                    "payload": {"type": "json", "value": '{"bg": "#000"}'},
                    "overrides": [
                        {"contextName": "userId", "values": [f"vip{i}" for i in range(200)]}
                    ],
                },
                {"name": "light", "weight": 250, "weightType": "variable", "stickiness": "default"},
            ],
        },
        {
            "featureName": "banner",
            "environment": "production",
            "enabled": True,
            "variants": [{"name": "quiet", "weight": 1000, "stickiness": "default"}],
        },
    ],
}


def test_variants_import_as_unleash_serves_them(api: Api) -> None:
    """A feature's variants (its environment's and a strategy's own, weights, payloads,
    overrides) served as Unleash's getVariant would: by share, since bucketing differs."""
    converted = unleash.convert(VARIANTS, "production")
    assert not [n for n in converted.notes if "variant" in n], converted.notes
    assert apply(api, converted.document)["applied"] is True
    dark = {"name": "dark", "enabled": True, "payload": {"type": "json", "value": '{"bg": "#000"}'}}
    light = {"name": "light", "enabled": True}
    off = {"name": "disabled", "enabled": False}
    served = [value(api, "theme", {"key": f"u{i}"}) for i in range(600)]
    shares = {
        name: sum(v == x for v in served) / 600
        for name, x in (("dark", dark), ("light", light), ("off", off))
    }
    assert abs(shares["off"] - 0.5) < 0.07, shares  # the gradual rollout: half
    assert abs(shares["dark"] - 0.375) < 0.07, shares  # 750 of 1,000 of the half
    assert abs(shares["light"] - 0.125) < 0.05, shares
    # overridden to dark, within the gradual rollout's share (the rest: disabled)
    vips = [value(api, "theme", {"key": f"vip{i}"}) for i in range(200)]
    assert light not in vips
    assert abs(vips.count(dark) / 200 - 0.5) < 0.1
    loud = {"name": "loud", "enabled": True, "payload": {"type": "string", "value": "LOUD"}}
    assert value(api, "banner", {"key": "x", "beta": "yes"}) == loud  # the strategy's own
    assert value(api, "banner", {"key": "x"}) == {"name": "quiet", "enabled": True}
    live = next(f for f in export(api)["flags"] if f["key"] == "theme")
    assert (live["type"], [v["name"] for v in live["variations"]]) == (
        "json",
        ["disabled", "dark", "light"],
    )
    assert apply(api, converted.document)["applied"] is False  # the same file: nothing to do


def test_a_variant_without_a_whole_weight_is_refused_naming_the_feature() -> None:
    data = {
        **VARIANTS,
        "featureEnvironments": [
            {
                "featureName": "theme",
                "environment": "production",
                "enabled": True,
                "variants": [{"name": "dark", "weight": "lots"}],
            }
        ],
    }
    with pytest.raises(Refused) as refused:
        unleash.convert(data, "production")
    assert refused.value.where.startswith("feature theme")
    assert "weight 'lots'" in refused.value.construct
