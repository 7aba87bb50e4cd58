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
    assert (
        "feature dark-mode: variants (imported as on or off; its variants are not)"
        in converted.notes
    )
    assert apply(api, converted.document)["applied"] is True
    matching = {"key": "u1", "country": "DE", "age": 30, "appVersion": "2.1.0"}
    assert value(api, "newcheckout", matching) is True
    for outside in ({**matching, "appVersion": "1.0.0"}, {**matching, "age": 17}):
        path = "/flags/newcheckout/environments/production/evaluate"
        assert ok(api.post(path, {"context": outside}))["reason"] == "FALLTHROUGH"  # the rollout
    rolled = [value(api, "newcheckout", {"key": f"k{i}"}) for i in range(300)]
    assert 0.18 < rolled.count(True) / 300 < 0.42  # 30 percent: bucketing differs, shares not
    assert value(api, "dark-mode", {"key": "bob"}) is True
    assert value(api, "dark-mode", {"key": "carl"}) is False
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
