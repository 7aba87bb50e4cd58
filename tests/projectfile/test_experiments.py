"""Experiments in the project document (issue #36): their definitions exported sorted by key,
never their results; planned field by field and applied through the experiments' services; what
the service would refuse once an experiment runs or has exposed units is refused at plan time,
naming its path, and nothing is written."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, ok, plan


def _seed(api: Api) -> None:
    ok(
        api.post(
            "/metrics",
            {"key": "signups", "name": "Signups", "event": "signup", "aggregation": "count"},
        ),
        201,
    )
    ok(
        api.post(
            "/metrics", {"key": "revenue", "name": "Revenue", "event": "buy", "aggregation": "sum"}
        ),
        201,
    )
    ok(
        api.post(
            "/experiments",
            {
                "key": "pricing",
                "name": "Pricing page",
                "type": "manual",
                "goal": "signup",
                "activate": False,
                "variants": [
                    {"key": "treatment", "content": "cheap", "weight": 40},
                    {"key": "control", "content": "as is", "weight": 60},
                ],
            },
        ),
        201,
    )
    ok(api.put("/experiments/pricing/metrics", {"primary": "signups", "guardrails": ["revenue"]}))
    ok(
        api.post(
            "/experiments",
            {
                "key": "hero",
                "name": "Hero button",
                "type": "cta",
                "selector": "#hero",
                "url": "/home",
                "variants": [
                    {"key": "control", "content": "Buy"},
                    {"key": "bold", "content": "Buy now", "bg": "#000000"},
                ],
            },
        ),
        201,
    )


def _experiment(document: dict[str, Any], key: str) -> dict[str, Any]:
    return next(x for x in document["experiments"] if x["key"] == key)


def test_experiments_are_exported_sorted_without_results(api: Api) -> None:
    _seed(api)
    ok(api.post("/experiments/hero/assign", {"unit": "u1", "url": "/home"}))
    document = export(api)
    assert [x["key"] for x in document["experiments"]] == ["hero", "pricing"]
    pricing = _experiment(document, "pricing")
    assert pricing == {
        "key": "pricing",
        "name": "Pricing page",
        "description": "",
        "type": "manual",
        "status": "draft",
        "url": "*",
        "goal": "signup",
        "statsEngine": "frequentist",
        "variants": [
            {"key": "control", "content": "as is", "weight": 60},
            {"key": "treatment", "content": "cheap", "weight": 40},
        ],
        "cuped": False,
        "unitKind": "user",
        "traffic": 1.0,
        "dimensions": [],
        "primary": "signups",
        "guardrails": ["revenue"],
    }
    hero = _experiment(document, "hero")
    assert hero["status"] == "running"
    assert not {"results", "exposed", "version", "id", "range", "startedAt"} & set(hero)
    assert plan(api, document)["hasChanges"] is False
    assert export(api) == document


def test_an_edit_plans_to_that_edit_and_applies(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    pricing = _experiment(changed, "pricing")
    pricing["name"] = "Pricing, again"
    pricing["variants"][1]["content"] = "cheaper"
    pricing["guardrails"] = []
    pricing["status"] = "running"
    found = plan(api, changed)
    (change,) = found["changes"]
    assert (change["kind"], change["key"], change["action"]) == ("experiment", "pricing", "update")
    assert sorted((c["path"], c["before"], c["after"]) for c in change["changes"]) == [
        ("guardrails", ["revenue"], []),
        ("name", "Pricing page", "Pricing, again"),
        ("status", "draft", "running"),
        ("variants[1].content", "cheap", "cheaper"),
    ]
    assert found["versions"]["experiment:pricing"] == 2
    assert ok(api.get("/experiments/pricing"))["status"] == "draft"  # plan wrote nothing
    apply(api, changed, versions=found["versions"])
    live = ok(api.get("/experiments/pricing"))
    assert (live["status"], live["name"], live["guardrails"]) == ("running", "Pricing, again", [])
    assert export(api) == changed
    assert plan(api, changed)["hasChanges"] is False
    audit = ok(api.get("/audit", params={"resourceType": "experiment"}))
    actions = {e["action"] for e in audit["entries"] if e["resourceKey"] == "pricing"}
    assert {"experiment.update", "experiment.metrics", "experiment.status"} <= actions


def test_new_experiments_are_created_from_the_document(api: Api) -> None:
    _seed(api)
    changed = edited(export(api))
    changed["experiments"].append(
        {
            "key": "checkout-copy",
            "goal": "buy",
            "status": "stopped",
            "primary": "revenue",
        }
    )
    changed["experiments"].append({"key": "later", "goal": "signup"})
    found = plan(api, changed)
    assert {(c["key"], c["action"]) for c in found["changes"]} == {
        ("checkout-copy", "create"),
        ("later", "create"),
    }
    assert api.get("/experiments/later").status_code == 404
    apply(api, changed, versions=found["versions"])
    made = ok(api.get("/experiments/checkout-copy"))
    assert (made["status"], made["primary"], made["name"]) == (
        "stopped",
        "revenue",
        "checkout-copy",
    )
    assert ok(api.get("/experiments/later"))["status"] == "draft"  # a new one: draft
    assert plan(api, changed)["hasChanges"] is False
    assert [x["key"] for x in export(api)["experiments"]] == [
        "checkout-copy",
        "hero",
        "later",
        "pricing",
    ]


def test_what_cannot_change_is_refused_naming_its_path(api: Api) -> None:
    _seed(api)
    ok(
        api.post("/experiments/hero/assign", {"unit": "u1", "url": "/home"})
    )  # hero: running, a unit exposed
    document = export(api)
    hero_at = [x["key"] for x in document["experiments"]].index("hero")
    changed = edited(document)
    hero = _experiment(changed, "hero")
    hero["type"] = "element"
    hero["selector"] = "#other"
    hero["status"] = "draft"
    hero["traffic"] = 0.5
    pricing = _experiment(changed, "pricing")
    pricing["status"] = "stopped"
    pricing["variants"].append({"key": "third"})
    for path in ("/plan", "/apply"):
        refused = api.post(path, {"document": changed})
        assert refused.status_code == 422, refused.text
        fields = {d["field"] for d in refused.json()["error"]["details"]}
        pricing_at = 1 - hero_at
        assert fields == {
            f"experiments[{hero_at}].type",
            f"experiments[{hero_at}].selector",
            f"experiments[{hero_at}].status",
            f"experiments[{hero_at}].traffic",
            f"experiments[{pricing_at}].status",
            f"experiments[{pricing_at}].variants",
        }
    assert export(api) == document  # nothing written


def test_a_bad_new_experiment_is_refused_naming_its_path(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    changed["experiments"].append({"key": "no-goal"})  # a manual experiment names its goal
    changed["experiments"].append({"key": "bad-metric", "goal": "x", "primary": "nope"})
    refused = api.post("/apply", {"document": changed})
    assert refused.status_code == 422, refused.text
    fields = [d["field"] for d in refused.json()["error"]["details"]]
    assert fields in (["experiments[2].goal"], ["experiments[3].primary"])
    assert export(api) == document


def test_the_schema_describes_experiments(api: Api) -> None:
    body = ok(api.client.get("/schema/project.json"))
    assert body["$defs"]["ProjectDoc"]["properties"]["experiments"]["type"] == "array"
    experiment = body["$defs"]["ExperimentDoc"]
    assert experiment["required"] == ["key"]
    assert {"status", "variants", "layer", "traffic", "primary", "guardrails"} <= set(
        experiment["properties"]
    )
    assert "results" not in experiment["properties"]


def test_an_exposed_experiments_page_is_fixed_even_with_its_variants_changed(api: Api) -> None:
    _seed(api)
    ok(api.post("/experiments/hero/assign", {"unit": "u1", "url": "/home"}))
    document = export(api)
    hero_at = [x["key"] for x in document["experiments"]].index("hero")
    changed = edited(document)
    hero = _experiment(changed, "hero")
    hero["url"] = "/elsewhere"
    hero["variants"][1]["key"] = "renamed"
    refused = api.post("/plan", {"document": changed})
    assert refused.status_code == 422, refused.text
    assert {d["field"] for d in refused.json()["error"]["details"]} == {
        f"experiments[{hero_at}].url",
        f"experiments[{hero_at}].variants",
    }
