"""Vane's flags exported as a flagd file and evaluated by flagd's own evaluator
(``openfeature-flagd-core``, the in-process resolver's core) for the same 1,000 generated
contexts (issue #36): the same variant for every flag whose conversion is exact; a rollout
(``fractional``) compared by share, since the products bucket differently."""

from __future__ import annotations

import random
from typing import Any

import pytest
from openfeature.contrib.tools.flagd.core import FlagdCore
from openfeature.evaluation_context import EvaluationContext

from control_plane.domain.projectfile.imports import flagd
from tests.conftest import Api
from tests.projectfile.conftest import export, ok
from tests.projectfile.test_import_flagd import FLAGD

CONTEXTS = 1000
RULES: dict[str, list[dict[str, Any]]] = {
    "plans": [
        {"clauses": [{"attribute": "plan", "op": "in", "values": ["pro", "team"]}], "variation": 1},
        {
            "clauses": [{"attribute": "email", "op": "endsWith", "values": ["@example.com"]}],
            "variation": 2,
        },
    ],
    "ages": [
        {
            "clauses": [{"attribute": "age", "op": "greaterThanOrEqual", "values": [65]}],
            "variation": 2,
        },
        {
            "clauses": [
                {"attribute": "age", "op": "lessThan", "values": [18]},
                {"attribute": "country", "op": "in", "values": ["DE", "FR", "NL"]},
            ],
            "variation": 1,
        },
    ],
    "versions": [
        {
            "clauses": [
                {
                    "attribute": "/app/version",
                    "contextKind": "user",
                    "op": "semVerGreaterThan",
                    "values": ["2.0.0"],
                }
            ],
            "variation": 1,
        },
        {
            "clauses": [{"attribute": "email", "op": "contains", "values": ["+test"]}],
            "variation": 2,
        },
        {"clauses": [{"attribute": "key", "op": "startsWith", "values": ["qa-"]}], "variation": 2},
    ],
}


def seed(api: Api) -> None:
    for key in ("plans", "ages", "versions", "split", "dormant"):
        variations = [{"value": f"{key}-{i}", "name": f"v{i}"} for i in range(3)]
        ok(api.post("/flags", {"key": key, "type": "string", "variations": variations}), 201)
    for key, rules in RULES.items():
        ok(
            api.put(
                f"/flags/{key}/environments/production",
                {
                    "enabled": True,
                    "fallthrough": {"variation": 0},
                    "targets": [{"variation": 2, "values": ["vip-1", "vip-2"]}],
                },
            )
        )
        ok(api.put(f"/flags/{key}/environments/production/rules", {"rules": rules}))
    rollout = [{"idx": 0, "weight": 20}, {"idx": 1, "weight": 30}, {"idx": 2, "weight": 50}]
    ok(
        api.put(
            "/flags/split/environments/production",
            {"enabled": True, "fallthrough": {"rollout": rollout}},
        )
    )
    ok(api.put("/flags/dormant/environments/production", {"enabled": False, "offVariation": 1}))


def contexts() -> list[dict[str, Any]]:
    rng = random.Random(36)
    made = []
    for i in range(CONTEXTS):
        context: dict[str, Any] = {"key": rng.choice([f"u-{i}", f"qa-{i}", "vip-1"])}
        if rng.random() < 0.8:
            context["plan"] = rng.choice(["free", "pro", "team", "Pro"])
        if rng.random() < 0.8:
            context["age"] = rng.choice([10, 17, 18, 30, 64, 65, 90, 17.5])
        if rng.random() < 0.8:
            context["country"] = rng.choice(["DE", "FR", "NL", "US", "de"])
        if rng.random() < 0.8:
            context["email"] = rng.choice(["a@example.com", "b+test@x.org", "c@example.org"])
        if rng.random() < 0.8:
            context["app"] = {"version": rng.choice(["1.9.9", "2.0.0", "2.0.1", "10.0.0"])}
        made.append(context)
    return made


# the conversion is the same on either database: the thousand evaluations run once, on SQLite
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_exported_flags_evaluate_in_flagd_as_in_vane(api: Api) -> None:
    seed(api)
    exported = flagd.export(export(api), "production")
    assert exported.notes == []
    evaluator = FlagdCore()
    evaluator.set_flags(exported.document)
    split: dict[str, dict[str, str]] = {"vane": {}, "flagd": {}}  # by context key
    for context in contexts():
        attributes = {k: v for k, v in context.items() if k != "key"}
        flagd_context = EvaluationContext(targeting_key=context["key"], attributes=attributes)
        for key in ("plans", "ages", "versions", "dormant", "split"):
            vane = ok(
                api.post(f"/flags/{key}/environments/production/evaluate", {"context": context})
            )
            theirs = evaluator.resolve_string_value(key, "default", flagd_context)
            if key == "split":
                split["vane"][context["key"]] = vane["value"]
                split["flagd"][context["key"]] = theirs.value
                continue
            assert theirs.value == vane["value"], (key, context, theirs, vane["reason"])
    for side, by_key in split.items():
        values = list(by_key.values())
        assert len(values) > 600  # the distinct keys among the contexts
        shares = [values.count(f"split-{i}") / len(values) for i in range(3)]
        for share, expected in zip(shares, (0.2, 0.3, 0.5), strict=True):
            assert abs(share - expected) < 0.05, (side, shares)


def test_an_imported_flagd_file_evaluates_in_vane_as_in_flagd(api: Api) -> None:
    """The other way: a flagd file (``$ref``, nested ``if``, ``and``, ``or``, both ``in``s,
    comparisons, ``starts_with``, ``ends_with``, ``sem_ver``) imported, then the same contexts
    evaluated by flagd and by Vane. The contexts carry ``age`` (the import lists that JsonLogic
    compares a missing one as 0) and no ``tier`` (whose branch is a ``fractional``)."""
    converted = flagd.convert(FLAGD, "production")
    ok(api.post("/apply", {"document": converted.document, "fileName": "flags.json"}))
    evaluator = FlagdCore()
    evaluator.set_flags(FLAGD)
    rng = random.Random(7)
    served = set()
    for context in contexts()[:300]:
        context["age"] = rng.choice([10, 17, 18, 30, 65])
        context["key"] = rng.choice([context["key"], "qa-7"])
        attributes = {k: v for k, v in context.items() if k != "key"}
        theirs = evaluator.resolve_string_value(
            "banner",
            "default",
            EvaluationContext(targeting_key=context["key"], attributes=attributes),
        )
        vane = ok(api.post("/flags/banner/environments/production/evaluate", {"context": context}))
        assert theirs.value == vane["value"], (context, theirs, vane)
        served.add(vane["value"])
    assert served == {"none", "red", "blue", "green"}  # every branch was taken
