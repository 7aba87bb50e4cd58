"""The rule of plan and apply (issue #36): what a plan accepts, the apply of the same document
does, and what a plan refuses, the apply refuses with the same error, nothing written. A plan
rehearses the apply's own writes and rolls them back, without flushing the bulk writers' rows:
this test holds that shortcut to the rule with generated documents, new flags and edits of live
ones, valid and not (a regex or a version that does not compile, a variation out of range, an
unknown segment or prerequisite, a prerequisite cycle, archived flags, a protected
environment's change requests)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import Api
from tests.projectfile.conftest import ok

KEYS = ("alpha", "beta", "gamma", "delta")
ENVIRONMENTS = ("production", "staging")
CLAUSES = st.sampled_from(
    [
        {"attribute": "country", "op": "in", "values": ["DE", "FR"]},
        {"attribute": "email", "op": "matches", "values": ["^[a-z]+@example\\.com$"]},
        {"attribute": "email", "op": "matches", "values": ["(unclosed"]},  # does not compile
        {"attribute": "version", "op": "semVerGreaterThan", "values": ["1.2.3"]},
        {"attribute": "version", "op": "semVerGreaterThan", "values": ["not-a-version"]},
        {"op": "segmentMatch", "values": ["testers"]},
        {"op": "segmentMatch", "values": ["nobody-made-this"]},  # unknown segment
        {"attribute": "plan", "op": "startsWith", "values": ["pro"]},
        {"attribute": "country", "op": "in", "values": ["US"]},
        {"op": "segmentMatch", "values": ["testers"]},
    ]
)
VARIATION = st.sampled_from([0, 1, 0, 1, 2])  # a boolean flag has 0 and 1: 2 is out of range


@st.composite
def settings_of(draw: st.DrawFn, key: str) -> dict[str, Any]:
    prerequisites = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
    return {
        "enabled": draw(st.booleans()),
        "offVariation": draw(VARIATION),
        "fallthrough": draw(
            st.sampled_from(
                [
                    {"variation": 0},
                    {"variation": 1},
                    {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}]},
                ]
            )
        ),
        "targets": [{"variation": draw(VARIATION), "values": ["vip-1"]}]
        if draw(st.booleans())
        else [],
        "prerequisites": [
            {"key": other, "variation": 0} for other in prerequisites if other != key
        ],
        "rules": [
            {"clauses": [draw(CLAUSES)], "serve": {"variation": draw(VARIATION)}}
            for _ in range(draw(st.integers(0, 2)))
        ],
    }


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    flags = []
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)):
        environments = draw(st.lists(st.sampled_from(ENVIRONMENTS), max_size=2, unique=True))
        flags.append(
            {
                "key": key,
                "variations": [{"value": True, "name": "on"}, {"value": False, "name": "off"}],
                "archived": draw(st.booleans()) and draw(st.booleans()),
                "description": draw(st.sampled_from(["", "first", "second"])),
                "environments": {env: draw(settings_of(key)) for env in environments},
            }
        )
    return {"flags": flags}


def _answer(response: Any) -> tuple[int, Any]:
    body = response.json()
    if response.status_code == 200:
        return 200, None
    error = body["error"]
    return response.status_code, (error["code"], error["message"], error["details"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=documents(), protect=st.booleans())
def test_a_plan_answers_as_its_apply_does(
    api: Api, document: dict[str, Any], protect: bool
) -> None:
    if api.get("/segments/testers").status_code != 200:
        ok(api.post("/segments", {"key": "testers", "included": ["t1"]}), 201)
    live = ok(api.get("/environments/production"))
    wanted = 1 if protect else 0
    if live["requiredApprovals"] != wanted:
        ok(api.patch("/environments/production", {"requiredApprovals": wanted}))
    before = ok(api.get("/export"))
    planned = api.post("/plan", {"document": document})
    assert planned.status_code in (200, 409, 422), planned.text
    assert ok(api.get("/export")) == before  # a plan writes nothing
    applied = api.post("/apply", {"document": document, "fileName": "generated.yaml"})
    assert _answer(applied) == _answer(planned), (planned.text, applied.text)
    event(f"{applied.status_code}, {len(applied.json().get('changeRequests') or [])} requests")
    if applied.status_code != 200:
        assert ok(api.get("/export")) == before  # a refused apply writes nothing either
        return
    plan = planned.json()
    assert applied.json()["plan"]["changes"] == plan["changes"]
    again = ok(api.post("/plan", {"document": document}))
    if not applied.json()["changeRequests"]:
        assert again["hasChanges"] is False, again["changes"]
