"""Vane's flags exported as a flagd file and evaluated by flagd's own evaluator
(``openfeature-flagd-core``, the in-process resolver's core) for the same 1,000 generated
contexts (issue #36): the same variant for every flag whose conversion is exact; a rollout
(``fractional``) compared by share, since the products bucket differently.

Vane's side is what a backend is served: a control plane and a relay started as ``vane`` starts
them (one pair for the module), every flag evaluated per context in one OFREP bulk request."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openfeature.contrib.tools.flagd.core import FlagdCore
from openfeature.evaluation_context import EvaluationContext

from control_plane.domain.projectfile.imports import flagd
from tests.e2e.test_relays import ControlPlane, Relay, eventually, start_control_plane, start_relay
from tests.projectfile.conftest import ok
from tests.projectfile.test_import_flagd import FLAGD

pytestmark = pytest.mark.e2e

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


class Vane:
    """A control plane and a relay: the API to write with, the relay to evaluate on."""

    def __init__(self, cp: ControlPlane, relay: Relay) -> None:
        self.cp = cp
        self.relay = relay
        self.http = httpx.Client(
            base_url=relay.url,
            headers={"Authorization": f"Bearer {cp.keys['server']}"},  # production's
            timeout=10,
        )

    def call(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        return ok(self.cp.api(method, path, body), status)

    def current(self) -> None:
        """Wait until the relay holds what was written."""
        [production] = [
            e for e in self.call("GET", "/environments")["environments"] if e["key"] == "production"
        ]
        eventually(
            lambda: (
                self.relay.readyz()["environments"].get("production", {}).get("version", -1)
                >= production["snapshotVersion"]
            ),
            what="the relay caught up",
        )

    def served(self, context: dict[str, Any]) -> dict[str, Any]:
        """Every flag's value for ``context`` (Vane's shape: ``key`` is the targeting key)."""
        body = {"context": {"targetingKey": context["key"], **context}}
        answer = self.http.post("/ofrep/v1/evaluate/flags", json=body)
        assert answer.status_code == 200, answer.text
        return {f["key"]: f.get("value") for f in answer.json()["flags"]}


@pytest.fixture(scope="module")
def vane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vane]:
    path: Path = tmp_path_factory.mktemp("flagd-cross-check")
    cp = start_control_plane(f"sqlite:///{path / 'vane.db'}", path)
    relay = start_relay(cp.url, cp.keys["relay"], path / "relay")
    pair = Vane(cp, relay)
    try:
        yield pair
    finally:
        pair.http.close()
        relay.process.stop()
        cp.process.stop()


def seed(vane: Vane) -> None:
    for key in ("plans", "ages", "versions", "split", "dormant"):
        variations = [{"value": f"{key}-{i}", "name": f"v{i}"} for i in range(3)]
        vane.call("POST", "/flags", {"key": key, "type": "string", "variations": variations}, 201)
    for key, rules in RULES.items():
        vane.call(
            "PUT",
            f"/flags/{key}/environments/production",
            {
                "enabled": True,
                "fallthrough": {"variation": 0},
                "targets": [{"variation": 2, "values": ["vip-1", "vip-2"]}],
            },
        )
        vane.call("PUT", f"/flags/{key}/environments/production/rules", {"rules": rules})
    rollout = [{"idx": 0, "weight": 20}, {"idx": 1, "weight": 30}, {"idx": 2, "weight": 50}]
    vane.call(
        "PUT",
        "/flags/split/environments/production",
        {"enabled": True, "fallthrough": {"rollout": rollout}},
    )
    vane.call(
        "PUT", "/flags/dormant/environments/production", {"enabled": False, "offVariation": 1}
    )


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


def test_exported_flags_evaluate_in_flagd_as_in_vane(vane: Vane) -> None:
    seed(vane)
    vane.current()
    exported = flagd.export(vane.call("GET", "/export"), "production")
    assert exported.notes == []
    evaluator = FlagdCore()
    evaluator.set_flags(exported.document)
    split: dict[str, dict[str, str]] = {"vane": {}, "flagd": {}}  # by context key
    for context in contexts():
        attributes = {k: v for k, v in context.items() if k != "key"}
        flagd_context = EvaluationContext(targeting_key=context["key"], attributes=attributes)
        served = vane.served(context)
        for key in ("plans", "ages", "versions", "dormant", "split"):
            theirs = evaluator.resolve_string_value(key, "default", flagd_context)
            if key == "split":
                split["vane"][context["key"]] = served[key]
                split["flagd"][context["key"]] = theirs.value
                continue
            assert theirs.value == served[key], (key, context, theirs, served)
    for side, by_key in split.items():
        values = list(by_key.values())
        assert len(values) > 600  # the distinct keys among the contexts
        shares = [values.count(f"split-{i}") / len(values) for i in range(3)]
        for share, expected in zip(shares, (0.2, 0.3, 0.5), strict=True):
            assert abs(share - expected) < 0.05, (side, shares)


def test_an_imported_flagd_file_evaluates_in_vane_as_in_flagd(vane: Vane) -> None:
    """The other way: a flagd file (``$ref``, nested ``if``, ``and``, ``or``, both ``in``s,
    comparisons, ``starts_with``, ``ends_with``, ``sem_ver``) imported, then the same contexts
    evaluated by flagd and by Vane. The contexts carry ``age`` (the import lists that JsonLogic
    compares a missing one as 0) and no ``tier`` (whose branch is a ``fractional``)."""
    converted = flagd.convert(FLAGD, "production")
    vane.call("POST", "/apply", {"document": converted.document, "fileName": "flags.json"})
    vane.current()
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
        value = vane.served(context)["banner"]
        assert theirs.value == value, (context, theirs, value)
        served.add(value)
    assert served == {"none", "red", "blue", "green"}  # every branch was taken
