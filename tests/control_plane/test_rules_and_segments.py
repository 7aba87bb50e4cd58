"""Targeting: rules in both forms, every operator, segments, individual targets, prerequisites."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create, fields

RULES = "/flags/checkout-flow/environments/staging/rules"


@pytest.fixture
def flag(api: Api) -> dict[str, Any]:
    return create(api, MULTI)


def segment(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/segments", body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_both_rule_forms_are_stored_in_one_form(api: Api, flag: dict[str, Any]) -> None:
    segment(api, {"key": "beta-testers", "included": ["u1", "u2"]})
    body = {
        "rules": [
            {
                "clauses": [{"attribute": "country", "op": "in", "values": ["DE", "FR"]}],
                "variation": 1,
            },
            {
                "clauses": [{"segment": "beta-testers", "op": "segmentMatch"}],
                "serve": {"variation": 2},
            },
            {
                "id": "plan-rollout",
                "description": "paid plans",
                "clauses": [{"attribute": "plan", "op": "in", "values": ["pro"], "negate": True}],
                "rollout": [{"idx": 0, "weight": 10}, {"idx": 2, "weight": 90}],
            },
            {
                "clauses": [{"attribute": "email", "op": "endsWith", "values": ["@example.com"]}],
                "serve": {
                    "rollout": [{"idx": 1, "weight": 50}, {"idx": 2, "weight": 50}],
                    "bucketBy": "company",
                },
            },
        ]
    }
    response = api.put(RULES, body)
    assert response.status_code == 200, response.text
    rules = response.json()["rules"]
    assert [r["serve"] for r in rules] == [
        {"variation": 1},
        {"variation": 2},
        {"rollout": [{"idx": 0, "weight": 10}, {"idx": 2, "weight": 90}]},
        {"rollout": [{"idx": 1, "weight": 50}, {"idx": 2, "weight": 50}], "bucketBy": "company"},
    ]
    assert rules[0]["clauses"] == [
        {"op": "in", "values": ["DE", "FR"], "attribute": "country", "negate": False}
    ]
    assert rules[1]["clauses"] == [
        {"op": "segmentMatch", "values": ["beta-testers"], "negate": False}
    ]
    assert rules[2]["id"] == "plan-rollout"
    assert rules[2]["description"] == "paid plans"
    assert rules[2]["clauses"][0]["negate"] is True
    assert all(r["id"] for r in rules)
    assert len({r["id"] for r in rules}) == 4
    assert api.get(RULES).json()["rules"] == rules
    assert api.get("/flags/checkout-flow/environments/production/rules").json()["rules"] == []
    replaced = api.put(RULES, {"rules": [body["rules"][0]]}).json()["rules"]
    assert len(replaced) == 1


@pytest.mark.parametrize(
    ("op", "values"),
    [
        ("in", ["a", 1, True]),
        ("startsWith", ["ab"]),
        ("endsWith", ["yz"]),
        ("contains", ["m"]),
        ("matches", ["^[a-z]+@example\\.com$"]),
        ("lessThan", [10]),
        ("lessThanOrEqual", [10.5]),
        ("greaterThan", [0]),
        ("greaterThanOrEqual", [-1]),
        ("before", ["2030-01-01T00:00:00Z"]),
        ("after", [1700000000000]),
        ("semVerEqual", ["1.2.3"]),
        ("semVerLessThan", ["2.0.0-beta.1"]),
        ("semVerGreaterThan", ["1.0.0"]),
    ],
)
def test_every_operator_is_accepted(
    api: Api, flag: dict[str, Any], op: str, values: list[Any]
) -> None:
    body = {
        "rules": [
            {
                "clauses": [{"attribute": "attr", "op": op, "values": values, "negate": True}],
                "variation": 0,
            }
        ]
    }
    response = api.put(RULES, body)
    assert response.status_code == 200, response.text
    clause = response.json()["rules"][0]["clauses"][0]
    assert clause == {"op": op, "values": values, "attribute": "attr", "negate": True}


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        (
            {"clauses": [{"attribute": "a", "op": "equals", "values": ["x"]}], "variation": 0},
            "rules[0].clauses[0].op",
        ),
        (
            {"clauses": [{"attribute": "a", "op": "in", "values": []}], "variation": 0},
            "rules[0].clauses[0].values",
        ),
        (
            {"clauses": [{"op": "in", "values": ["x"]}], "variation": 0},
            "rules[0].clauses[0].attribute",
        ),
        (
            {"clauses": [{"attribute": "a", "op": "lessThan", "values": ["ten"]}], "variation": 0},
            "rules[0].clauses[0].values[0]",
        ),
        (
            {
                "clauses": [{"attribute": "a", "op": "matches", "values": ["(unclosed"]}],
                "variation": 0,
            },
            "rules[0].clauses[0].values[0]",
        ),
        (
            {
                "clauses": [{"attribute": "a", "op": "semVerEqual", "values": ["not.a.version"]}],
                "variation": 0,
            },
            "rules[0].clauses[0].values[0]",
        ),
        (
            {
                "clauses": [{"attribute": "a", "op": "before", "values": ["yesterday"]}],
                "variation": 0,
            },
            "rules[0].clauses[0].values[0]",
        ),
        (
            {"clauses": [{"segment": "nobody", "op": "segmentMatch"}], "variation": 0},
            "rules[0].clauses[0].segment",
        ),
        ({"clauses": [{"attribute": "a", "values": ["x"]}], "variation": 7}, "rules[0].variation"),
        ({"clauses": [{"attribute": "a", "values": ["x"]}]}, "rules[0]"),
        (
            {
                "clauses": [{"attribute": "a", "values": ["x"]}],
                "variation": 0,
                "serve": {"variation": 1},
            },
            "rules[0]",
        ),
        (
            {
                "clauses": [{"attribute": "a", "values": ["x"]}],
                "serve": {"rollout": [{"idx": 0, "weight": 99}]},
            },
            "rules[0].serve.rollout",
        ),
        ({"clauses": [], "variation": 0}, "rules[0].clauses"),
        (
            {"clauses": [{"attribute": "a", "values": ["x"], "extra": 1}], "variation": 0},
            "rules[0].clauses[0].extra",
        ),
    ],
)
def test_invalid_rules_name_the_field_and_change_nothing(
    api: Api, flag: dict[str, Any], rule: dict[str, Any], field: str
) -> None:
    api.put(
        RULES, {"rules": [{"clauses": [{"attribute": "kept", "values": ["yes"]}], "variation": 1}]}
    )
    before = api.get(RULES).json()
    response = api.put(RULES, {"rules": [rule]})
    assert response.status_code == 422, response.text
    assert field in fields(response), response.json()
    assert api.get(RULES).json() == before


def test_targets_and_prerequisites(api: Api, flag: dict[str, Any]) -> None:
    create(api, {"key": "parent"})
    response = api.put(
        "/flags/checkout-flow/environments/staging",
        {
            "targets": [
                {"variation": 2, "values": ["vip-1", "vip-2"]},
                {"variation": 0, "values": ["qa"]},
            ],
            "prerequisites": [{"key": "parent", "variation": 0}],
        },
    )
    assert response.status_code == 200, response.text
    settings = response.json()
    assert settings["targets"] == [
        {"variation": 2, "values": ["vip-1", "vip-2"]},
        {"variation": 0, "values": ["qa"]},
    ]
    assert settings["prerequisites"] == [{"key": "parent", "variation": 0}]
    # the parent cannot be archived while it is a prerequisite
    refused = api.post("/flags/parent/archive")
    assert refused.status_code == 409
    assert "checkout-flow" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"targets": [{"variation": 9, "values": ["a"]}]}, "targets[0].variation"),
        (
            {"targets": [{"variation": 0, "values": ["a"]}, {"variation": 1, "values": ["a"]}]},
            "targets[1].values[0]",
        ),
        ({"prerequisites": [{"key": "ghost", "variation": 0}]}, "prerequisites[0].key"),
        ({"prerequisites": [{"key": "checkout-flow", "variation": 0}]}, "prerequisites[0].key"),
        ({"prerequisites": [{"key": "parent", "variation": 5}]}, "prerequisites[0].variation"),
    ],
)
def test_invalid_targets_and_prerequisites(
    api: Api, flag: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    create(api, {"key": "parent"})
    response = api.put("/flags/checkout-flow/environments/staging", body)
    assert response.status_code == 422, response.text
    assert field in fields(response)


def test_prerequisite_cycles_are_refused(api: Api) -> None:
    for key in ("a", "b", "c"):
        create(api, {"key": key})
    assert (
        api.put(
            "/flags/a/environments/production", {"prerequisites": [{"key": "b", "variation": 0}]}
        ).status_code
        == 200
    )
    assert (
        api.put(
            "/flags/b/environments/production", {"prerequisites": [{"key": "c", "variation": 0}]}
        ).status_code
        == 200
    )
    response = api.put(
        "/flags/c/environments/production", {"prerequisites": [{"key": "a", "variation": 0}]}
    )
    assert response.status_code == 422
    assert "cycle" in response.json()["error"]["message"]
    # the same edge in another environment is no cycle
    assert (
        api.put(
            "/flags/c/environments/staging", {"prerequisites": [{"key": "a", "variation": 0}]}
        ).status_code
        == 200
    )


def test_segment_crud(api: Api) -> None:
    created = segment(
        api,
        {
            "key": "beta",
            "name": "Beta testers",
            "included": ["u1", "u2", "u1"],
            "excluded": ["u3"],
            "rules": [
                {
                    "clauses": [
                        {"attribute": "email", "op": "endsWith", "values": ["@corp.example"]}
                    ],
                    "weight": 25,
                }
            ],
        },
    )
    assert created["id"].startswith("seg_")
    assert created["included"] == ["u1", "u2"]
    assert created["rules"][0]["weight"] == 25
    assert api.get("/segments/beta").json() == created
    assert api.get("/segments").json()["count"] == 1
    patched = api.patch("/segments/beta", {"included": ["u9"], "name": "Beta"})
    assert patched.status_code == 200
    assert patched.json()["included"] == ["u9"]
    assert patched.json()["excluded"] == ["u3"]
    assert patched.json()["version"] == 2
    assert api.post("/segments", {"key": "beta"}).status_code == 409
    audit = api.get("/segments/beta/audit").json()["entries"]
    assert [e["action"] for e in audit] == ["segment.update", "segment.create"]
    deleted = api.delete("/segments/beta")
    assert deleted.status_code == 200
    assert api.get("/segments/beta").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "Bad Key"}, "key"),
        ({"key": "s", "included": [""]}, "included[0]"),
        (
            {"key": "s", "rules": [{"clauses": [{"attribute": "a", "op": "nope", "values": [1]}]}]},
            "rules[0].clauses[0].op",
        ),
        (
            {"key": "s", "rules": [{"clauses": [{"segment": "ghost"}]}]},
            "rules[0].clauses[0].segment",
        ),
        (
            {
                "key": "s",
                "rules": [{"clauses": [{"attribute": "a", "op": "matches", "values": ["("]}]}],
            },
            "rules[0].clauses[0].values[0]",
        ),
        (
            {
                "key": "s",
                "rules": [{"clauses": [{"attribute": "a", "values": [1]}], "weight": 101}],
            },
            "rules[0].weight",
        ),
        ({"key": "s", "members": ["a"]}, "members"),
    ],
)
def test_invalid_segments(refusing_api: Api, body: dict[str, Any], field: str) -> None:
    response = refusing_api.post("/segments", body)
    assert response.status_code == 422, response.text
    assert field in fields(response)
    assert refusing_api.get("/segments").json()["count"] == 0


def test_segment_in_use_cannot_be_deleted(api: Api, flag: dict[str, Any]) -> None:
    segment(api, {"key": "beta", "included": ["u1"]})
    segment(api, {"key": "outer", "rules": [{"clauses": [{"segment": "beta"}]}]})
    refused = api.delete("/segments/beta")
    assert refused.status_code == 409
    assert "outer" in refused.json()["error"]["message"]
    api.put(RULES, {"rules": [{"clauses": [{"segment": "outer"}], "variation": 1}]})
    refused = api.delete("/segments/outer")
    assert refused.status_code == 409
    assert "checkout-flow" in refused.json()["error"]["message"]
    api.put(RULES, {"rules": []})
    assert api.delete("/segments/outer").status_code == 200
    assert api.delete("/segments/beta").status_code == 200


def test_segment_cycles_are_refused(api: Api) -> None:
    segment(api, {"key": "a"})
    segment(api, {"key": "b", "rules": [{"clauses": [{"segment": "a"}]}]})
    response = api.patch("/segments/a", {"rules": [{"clauses": [{"segment": "b"}]}]})
    assert response.status_code == 422
    assert "cycle" in response.json()["error"]["message"]


def test_segment_change_republishes_environments_that_use_it(
    api: Api, flag: dict[str, Any]
) -> None:
    segment(api, {"key": "beta", "included": ["u1"]})
    api.put(RULES, {"rules": [{"clauses": [{"segment": "beta"}], "variation": 1}]})

    def versions() -> dict[str, int]:
        return {
            e["key"]: e["snapshotVersion"] for e in api.get("/environments").json()["environments"]
        }

    before = versions()
    api.patch("/segments/beta", {"included": ["u1", "u2"]})
    after = versions()
    assert after["staging"] == before["staging"] + 1  # the rule lives in staging
    assert after["production"] == before["production"]


def test_no_write_makes_a_chain_deeper_than_the_engine_compiles(api: Api) -> None:
    """The engine refuses a chain of prerequisites, or of segments naming segments, more than
    ``MAX_NESTING`` (32) long: the flags at its top would serve errors. Each write is checked on
    the whole would-be graph, so lengthening a chain at its bottom, far from the flag at the top
    it makes too deep, is refused too; a chain of exactly 32 is kept and evaluates."""
    for i in range(34):
        create(api, {"key": f"c{i}"})
    for i in reversed(range(31)):  # c0 -> c1 -> ... -> c31: 32 flags
        put = api.put(
            f"/flags/c{i}/environments/production",
            {"prerequisites": [{"key": f"c{i + 1}", "variation": 0}]},
        )
        assert put.status_code == 200, put.text
    preview = api.post("/flags/c0/environments/production/evaluate", {"context": {"key": "u"}})
    assert preview.json()["reason"] != "ERROR", preview.text
    for flag, named in (("c31", "c32"), ("c33", "c0")):  # at the bottom, then above the top
        refused = api.put(
            f"/flags/{flag}/environments/production",
            {"prerequisites": [{"key": named, "variation": 0}]},
        )
        assert refused.status_code == 422, refused.text
        assert "nested more than 32 deep" in refused.json()["error"]["message"]
        assert fields(refused) == ["prerequisites"]
    preview = api.post("/flags/c0/environments/production/evaluate", {"context": {"key": "u"}})
    assert preview.json()["reason"] != "ERROR", preview.text
    # an archived flag is in no snapshot: a chain it heads is not counted through it
    for i in reversed(range(1, 31)):  # in staging, c1 -> ... -> c31
        needs = {"prerequisites": [{"key": f"c{i + 1}", "variation": 0}]}
        assert api.put(f"/flags/c{i}/environments/staging", needs).status_code == 200
    above = {"prerequisites": [{"key": "c1", "variation": 0}]}
    assert api.put("/flags/c33/environments/staging", above).status_code == 200  # 32 long
    assert api.post("/flags/c33/archive", {}).status_code == 200
    last = {"prerequisites": [{"key": "c32", "variation": 0}]}  # c1 ... c32: 32 (c33 ... c32: 33)
    assert api.put("/flags/c31/environments/staging", last).status_code == 200
    refused = api.put("/flags/c0/environments/staging", above)  # c0 ... c32: 33
    assert refused.status_code == 422, refused.text

    segment(api, {"key": "s31"})
    for i in reversed(range(31)):  # s0 names s1 ... s30 names s31: 32 segments
        segment(api, {"key": f"s{i}", "rules": [{"clauses": [{"segment": f"s{i + 1}"}]}]})
    segment(api, {"key": "s32"})
    refused = api.patch("/segments/s31", {"rules": [{"clauses": [{"segment": "s32"}]}]})
    assert refused.status_code == 422, refused.text
    assert "nested more than 32 deep" in refused.json()["error"]["message"]
    refused = api.post("/segments", {"key": "above", "rules": [{"clauses": [{"segment": "s0"}]}]})
    assert refused.status_code == 422, refused.text
