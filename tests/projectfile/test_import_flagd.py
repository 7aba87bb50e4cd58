"""flagd's flag files imported through plan and apply (issue #36), and a project exported as a
flagd file: targeting's JsonLogic as Vane rules, evaluated through the API; what has no
equivalent named, what cannot be converted refused naming the flag and the operator."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.domain.projectfile.imports import Refused, flagd
from tests.conftest import Api
from tests.projectfile.conftest import apply, export, ok, plan

FLAGD: dict[str, Any] = {
    "$schema": "https://flagd.dev/schema/v0/flags.json",
    "$evaluators": {
        "staff": {"in": ["@example.com", {"var": "email"}]},
    },
    "flags": {
        "banner": {
            "state": "ENABLED",
            "variants": {"off": "none", "red": "red", "blue": "blue", "green": "green"},
            "defaultVariant": "off",
            "targeting": {
                "if": [
                    {"$ref": "staff"},
                    "red",
                    {
                        "and": [
                            {"in": [{"var": "country"}, ["DE", "FR"]]},
                            {">=": [{"var": "age"}, 18]},
                        ]
                    },
                    "blue",
                    {
                        "or": [
                            {"starts_with": [{"var": "targetingKey"}, "qa-"]},
                            {"ends_with": [{"var": "plan"}, "-pro"]},
                        ]
                    },
                    {"if": [{"sem_ver": [{"var": "app.version"}, ">", "2.0.0"]}, "green", "red"]},
                    {"==": [{"var": "tier"}, "gold"]},
                    {"fractional": [["red", 1], ["blue", 3]]},
                    None,
                ]
            },
        },
        "dark-mode": {
            "state": "DISABLED",
            "variants": {"on": True, "off": False},
            "defaultVariant": "off",
            "metadata": {"description": "the dark theme"},
        },
    },
}

CONTEXTS: list[tuple[dict[str, Any], str]] = [
    ({"key": "u1", "email": "ann@example.com", "country": "DE", "age": 30}, "red"),
    ({"key": "u2", "country": "FR", "age": 30}, "blue"),
    ({"key": "u3", "country": "FR", "age": 17}, "none"),
    ({"key": "qa-1", "app": {"version": "2.1.0"}}, "green"),
    ({"key": "u4", "plan": "team-pro", "app": {"version": "1.9.0"}}, "red"),
    ({"key": "u5", "plan": "team-pro"}, "red"),  # no version: the nested else
    ({"key": "u6"}, "none"),
]


def evaluate(api: Api, flag: str, context: dict[str, Any]) -> Any:
    found = ok(api.post(f"/flags/{flag}/environments/production/evaluate", {"context": context}))
    return found["value"]


def test_a_flagd_file_imports_as_rules_and_serves_what_flagd_would(api: Api) -> None:
    converted = flagd.convert(FLAGD, "production")
    assert any(n.startswith("flag dark-mode: DISABLED") for n in converted.notes)
    assert "flag banner: '>=' (JsonLogic compares a missing attribute as 0, Vane never)" in (
        converted.notes
    )
    assert apply(api, converted.document)["applied"] is True
    for context, value in CONTEXTS:
        assert evaluate(api, "banner", context) == value, context
    gold = [evaluate(api, "banner", {"key": f"g{i}", "tier": "gold"}) for i in range(400)]
    assert set(gold) == {"red", "blue"}
    assert 0.15 < gold.count("red") / 400 < 0.35  # 1 in 4: bucketing differs, shares do not
    live = export(api)
    banner = next(f for f in live["flags"] if f["key"] == "banner")
    assert [v["name"] for v in banner["variations"]] == ["off", "red", "blue", "green"]
    rules = banner["environments"]["production"]["rules"]
    assert rules[-1]["serve"]["rollout"] == [{"idx": 1, "weight": 25}, {"idx": 2, "weight": 75}]
    assert evaluate(api, "dark-mode", {"key": "u1"}) is False
    assert apply(api, converted.document)["applied"] is False  # twice is once


@pytest.mark.parametrize(
    ("targeting", "construct"),
    [
        (
            {"if": [{"some": [{"var": "xs"}, {"==": [{"var": ""}, 1]}]}, "a", "b"]},
            "operator 'some'",
        ),
        ({"if": [{"==": [{"var": "$flagd.timestamp"}, 1]}, "a", "b"]}, "var '$flagd.timestamp'"),
        ({"if": [{"==": [{"var": "x"}, 1]}, {"cat": ["a"]}, "b"]}, "targeting returns 'cat'"),
        ({"if": [{"==": [{"var": "x"}, 1]}, "zzz", "b"]}, "targeting returns 'zzz'"),
        ({"if": [{"sem_ver": [{"var": "v"}, "^", "1.0.0"]}, "a", "b"]}, "sem_ver '^'"),
    ],
)
def test_what_cannot_be_converted_is_refused_naming_flag_and_operator(
    targeting: Any, construct: str
) -> None:
    file = {
        "flags": {
            "f": {"variants": {"a": "a", "b": "b"}, "defaultVariant": "b", "targeting": targeting}
        }
    }
    with pytest.raises(Refused) as refused:
        flagd.convert(file, "production")
    assert refused.value.where == "flag f"
    assert construct in refused.value.construct


def test_a_project_exports_as_a_flagd_file_that_imports_back_the_same(api: Api) -> None:
    converted = flagd.convert(FLAGD, "production")
    apply(api, converted.document)
    ok(api.post("/segments", {"key": "beta", "included": ["u1"]}), 201)
    ok(api.post("/flags", {"key": "seg"}), 201)
    ok(api.put("/flags/seg/environments/production", {"enabled": True}))
    ok(
        api.put(
            "/flags/seg/environments/production/rules",
            {"rules": [{"clauses": [{"segment": "beta"}], "variation": 0}]},
        )
    )
    out = flagd.export(export(api), "production")
    assert out.notes == ["flag seg: a segment (not exported)"]
    assert set(out.document["flags"]) == {"banner", "dark-mode"}
    back = flagd.convert(out.document, "production")
    for context, value in CONTEXTS:
        assert evaluate(api, "banner", context) == value
    again = plan(api, back.document)["changes"]
    # The same rules read back; an off flag is exported as serving its off variation (flagd's
    # DISABLED answers the application's default instead), so it comes back on, serving that.
    assert [(c["key"], c["changes"]) for c in again] == [
        ("dark-mode", [{"path": "enabled", "before": False, "after": True}])
    ]
