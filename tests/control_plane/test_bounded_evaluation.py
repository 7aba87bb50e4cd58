"""The regular-expression budget and the attribute caps over the API (issue #33): a rule the
relays could not run in milliseconds is a 422 naming the field; a preview of an attribute past
a cap is no match, never a 500."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create, fields

RULES = "/flags/checkout-flow/environments/staging/rules"
EVALUATE = "/flags/checkout-flow/environments/staging/evaluate"
BLOWUP = "[ab]*a[ab]{400}c"  # 2^400 DFA states: RE2 falls back to its NFA
SMALL_BLOWUP = "[ab]*a[ab]{40}c"


def _rule(op: str, values: list[Any]) -> dict[str, Any]:
    return {"clauses": [{"attribute": "a", "op": op, "values": values}], "variation": 1}


def test_a_pattern_over_the_budget_is_a_422_naming_the_value(api: Api) -> None:
    create(api, MULTI)
    response = api.put(RULES, {"rules": [_rule("matches", ["^ok$", BLOWUP])]})
    assert response.status_code == 422, response.text
    assert "rules[0].clauses[0].values[1]" in fields(response)
    assert "RE2 instructions" in response.text


def test_fifty_patterns_in_one_clause_are_a_422_naming_the_value(api: Api) -> None:
    create(api, MULTI)
    response = api.put(RULES, {"rules": [_rule("matches", [SMALL_BLOWUP] * 50)]})
    assert response.status_code == 422, response.text
    assert any(f.startswith("rules[0].clauses[0].values[") for f in fields(response))
    assert api.get(RULES).json()["rules"] == []


def test_a_flags_patterns_over_the_budget_are_a_422(api: Api) -> None:
    create(api, MULTI)
    rules = [_rule("matches", [SMALL_BLOWUP] * 10) for _ in range(5)]
    response = api.put(RULES, {"rules": rules})
    assert response.status_code == 422, response.text
    assert any(f.startswith("rules[2].clauses[0].values[") for f in fields(response))


def test_a_segments_patterns_over_the_budget_are_a_422(api: Api) -> None:
    rules = [{"clauses": [{"attribute": "a", "op": "matches", "values": [SMALL_BLOWUP] * 50}]}]
    response = api.post("/segments", {"key": "s", "rules": rules})
    assert response.status_code == 422, response.text
    assert any(f.startswith("rules[0].clauses[0].values[") for f in fields(response))


def test_a_preview_of_a_version_past_the_cap_is_no_match(api: Api) -> None:
    create(api, MULTI)
    api.put("/flags/checkout-flow/environments/staging", {"enabled": True})
    response = api.put(RULES, {"rules": [_rule("semVerLessThan", ["2.0.0"])]})
    assert response.status_code == 200, response.text
    for version in ["9" * 200_000, "1.0.0-" + "a1" * 250_000, "1.0.0-" + "1" * 200_000]:
        answer = api.post(EVALUATE, {"context": {"key": "u", "a": version}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["reason"] == "FALLTHROUGH"
    hit = api.post(EVALUATE, {"context": {"key": "u", "a": "1.9.0"}}).json()
    assert hit["reason"] == "RULE_MATCH"


def test_a_contains_clause_over_the_budget_is_a_422_naming_the_value(api: Api) -> None:
    """Each ``contains`` value is one pass over the attribute: 10,000 of them against a 16 KiB
    attribute was ~0.8 s a request. They count in the search budget, one a value."""
    create(api, MULTI)
    values = [f"part-{i}" for i in range(600)]
    response = api.put(RULES, {"rules": [_rule("contains", values)]})
    assert response.status_code == 422, response.text
    assert "rules[0].clauses[0].values[512]" in fields(response)
    ok = api.put(RULES, {"rules": [_rule("contains", values[:512]), _rule("matches", ["^x"])]})
    assert ok.status_code == 200, ok.text
    over = api.put(
        RULES, {"rules": [_rule("contains", values[:512]), _rule("contains", values[:513])]}
    )
    assert over.status_code == 422, over.text
    assert any(f.startswith("rules[1].clauses[0].values[") for f in fields(over))


def test_a_preview_of_a_string_past_the_cap_is_no_match(api: Api) -> None:
    create(api, MULTI)
    api.put("/flags/checkout-flow/environments/staging", {"enabled": True})
    response = api.put(RULES, {"rules": [_rule("contains", ["needle"])]})
    assert response.status_code == 200, response.text
    far = api.post(EVALUATE, {"context": {"key": "u", "a": "a" * 500_000 + "needle"}})
    assert far.status_code == 200, far.text
    assert far.json()["reason"] == "FALLTHROUGH"
    near = api.post(EVALUATE, {"context": {"key": "u", "a": "a" * 1_000 + "needle"}})
    assert near.json()["reason"] == "RULE_MATCH"
