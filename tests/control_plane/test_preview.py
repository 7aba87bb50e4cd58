"""Preview: what a relay would serve a context, computed by the shared engine."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create

EVALUATE = "/flags/checkout-flow/environments/staging/evaluate"


def preview(api: Api, context: dict[str, Any], path: str = EVALUATE) -> dict[str, Any]:
    response = api.post(path, {"context": context})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_preview_follows_the_resolution_order(api: Api) -> None:
    create(api, MULTI)
    api.post("/segments", {"key": "beta", "included": ["u-beta"]})
    off = preview(api, {"key": "u1", "country": "DE"})
    assert (off["value"], off["reason"], off["openfeatureReason"]) == ("express", "OFF", "DISABLED")
    api.put(
        "/flags/checkout-flow/environments/staging",
        {"enabled": True, "targets": [{"variation": 0, "values": ["vip"]}]},
    )
    api.put(
        "/flags/checkout-flow/environments/staging/rules",
        {
            "rules": [
                {
                    "id": "eu",
                    "clauses": [{"attribute": "country", "op": "in", "values": ["DE", "FR"]}],
                    "variation": 1,
                },
                {"id": "beta", "clauses": [{"segment": "beta"}], "variation": 2},
            ]
        },
    )
    rule = preview(api, {"key": "u1", "country": "DE"})
    assert (rule["value"], rule["reason"], rule["ruleIndex"], rule["ruleId"]) == (
        "one-page",
        "RULE_MATCH",
        0,
        "eu",
    )
    assert rule["openfeatureReason"] == "TARGETING_MATCH"
    target = preview(api, {"targetingKey": "vip", "country": "DE"})
    assert (target["value"], target["reason"]) == ("classic", "TARGET_MATCH")
    segment = preview(api, {"key": "u-beta", "country": "US"})
    assert (segment["value"], segment["ruleId"]) == ("express", "beta")
    fallthrough = preview(api, {"key": "u2", "country": "US"})
    assert (fallthrough["value"], fallthrough["reason"]) == ("classic", "FALLTHROUGH")
    missing = preview(api, {"country": "US"})
    assert (missing["reason"], missing["errorKind"], missing["errorCode"]) == (
        "ERROR",
        "USER_NOT_SPECIFIED",
        "TARGETING_KEY_MISSING",
    )
    assert missing["value"] is None
    production = preview(
        api, {"key": "u1", "country": "DE"}, "/flags/checkout-flow/environments/production/evaluate"
    )
    assert production["reason"] == "OFF"


def test_preview_of_a_rollout_is_deterministic_and_split(api: Api) -> None:
    create(api, {"key": "half"})
    api.put(
        "/flags/half/environments/production",
        {
            "enabled": True,
            "fallthrough": {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}]},
        },
    )
    path = "/flags/half/environments/production/evaluate"
    results = [preview(api, {"key": f"user-{i}"}, path) for i in range(40)]
    assert {r["openfeatureReason"] for r in results} == {"SPLIT"}
    assert {r["value"] for r in results} == {True, False}
    assert [preview(api, {"key": f"user-{i}"}, path)["value"] for i in range(40)] == [
        r["value"] for r in results
    ]


def test_preview_of_archived_flag_is_not_found_and_unknown_is_404(api: Api) -> None:
    create(api, {"key": "gone"})
    api.post("/flags/gone/archive")
    gone = preview(api, {"key": "u"}, "/flags/gone/environments/production/evaluate")
    assert (gone["reason"], gone["errorKind"]) == ("ERROR", "FLAG_NOT_FOUND")
    assert (
        api.post(
            "/flags/nope/environments/production/evaluate", {"context": {"key": "u"}}
        ).status_code
        == 404
    )
    bad = api.post("/flags/gone/environments/production/evaluate", {"ctx": {}})
    assert bad.status_code == 422
