"""Export, plan and apply over HTTP (issue #36): a project exported plans to nothing, an edit
plans to exactly that edit, applying it makes the export equal the edited document, and
applying twice changes nothing the second time."""

from __future__ import annotations

import yaml

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, flag_of, ok, plan


def test_an_export_plans_to_nothing(seeded: Api) -> None:
    document = export(seeded)
    assert [e["key"] for e in document["environments"]] == sorted(
        e["key"] for e in document["environments"]
    )
    checkout = flag_of(document, "checkout")
    rules = checkout["environments"]["staging"]["rules"]
    assert rules[0] == {
        "id": "r-beta",
        "description": "",
        "clauses": [{"op": "segmentMatch", "values": ["beta"], "negate": False}],
        "serve": {"variation": 2},
    }
    assert rules[1]["id"].startswith("rule_")  # its id, kept: stable across exports
    found = plan(seeded, document)
    assert found["hasChanges"] is False, found["changes"]
    assert found["changes"] == []
    assert "setting checkout/staging" in found["unchanged"]
    assert found["versions"]["setting:checkout/staging"] == 3
    assert export(seeded) == document  # the same order, the same ids, every time


def test_yaml_when_asked(seeded: Api) -> None:
    as_json = export(seeded)
    for asked in ({"params": {"format": "yaml"}}, {"headers": {"Accept": "application/yaml"}}):
        response = seeded.get("/export", **asked)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/yaml")
        assert yaml.safe_load(response.text) == as_json


def test_an_edit_plans_to_that_edit_and_applies(seeded: Api) -> None:
    document = export(seeded)
    changed = edited(document)
    staging = flag_of(changed, "checkout")["environments"]["staging"]
    staging["rules"][1]["serve"] = {"variation": 0}
    staging["enabled"] = False
    found = plan(seeded, changed)
    assert found["hasChanges"] is True
    (change,) = found["changes"]
    assert (change["kind"], change["key"], change["environment"], change["action"]) == (
        "setting",
        "checkout",
        "staging",
        "update",
    )
    assert {(c["path"], c["before"], c["after"]) for c in change["changes"]} == {
        ("enabled", True, False),
        ("rules[1].serve.variation", 1, 0),
    }
    done = apply(seeded, changed, versions=found["versions"])
    assert done["applied"] is True
    assert done["changeRequests"] == []
    assert export(seeded) == changed
    again = apply(seeded, changed)
    assert again["applied"] is False
    assert again["message"] == "nothing to change"
    assert export(seeded) == changed
    settings = ok(seeded.get("/flags/checkout/environments/staging"))
    assert settings["version"] == 5  # 3, then one for the settings and one for the rules


def test_new_resources_are_created_from_the_document(seeded: Api) -> None:
    document = export(seeded)
    changed = edited(document)
    changed["environments"].append({"key": "eu", "requiredApprovals": 1})
    changed["segments"].append({"key": "staff", "included": ["alice"]})
    changed["flags"].append(
        {
            "key": "banner",
            "variations": [{"value": True}, {"value": False}],
            "environments": {
                "eu": {
                    "enabled": True,
                    "offVariation": 1,
                    "fallthrough": {"variation": 0},
                    "rules": [{"clauses": [{"segment": "staff"}], "variation": 1}],
                },
                "staging": {
                    "enabled": True,
                    "offVariation": 1,
                    "fallthrough": {"variation": 0},
                    "prerequisites": [{"key": "checkout", "variation": 1}],
                },
            },
        }
    )
    found = plan(seeded, changed)
    kinds = {(c["kind"], c["key"], c["environment"], c["action"]) for c in found["changes"]}
    assert kinds == {
        ("environment", "eu", None, "create"),
        ("segment", "staff", None, "create"),
        ("flag", "banner", None, "create"),
        ("setting", "banner", "eu", "create"),
        ("setting", "banner", "staging", "create"),
    }
    done = apply(seeded, changed, versions=found["versions"])
    assert done["changeRequests"] == []  # a new environment starts as the document says
    assert ok(seeded.get("/environments/eu"))["requiredApprovals"] == 1
    assert plan(seeded, changed)["hasChanges"] is False
    after = flag_of(export(seeded), "banner")
    assert after["environments"]["eu"]["rules"][0]["serve"] == {"variation": 1}
    assert after["environments"]["staging"]["prerequisites"] == [
        {"key": "checkout", "variation": 1}
    ]


def test_a_variation_added_in_the_file_is_added(seeded: Api) -> None:
    changed = edited(export(seeded))
    checkout = flag_of(changed, "checkout")
    checkout["variations"].append({"idx": 3, "value": "express", "name": "Express"})
    checkout["environments"]["production"]["fallthrough"] = {"variation": 3}
    segment = next(x for x in changed["segments"] if x["key"] == "beta")
    segment["included"] = ["u2", "u1", "u2"]  # stored once each
    apply(seeded, changed)
    segment["included"] = ["u2", "u1"]
    assert export(seeded) == changed
    assert plan(seeded, changed)["hasChanges"] is False


def test_values_are_kept_exactly_nulls_inside_them_too(seeded: Api) -> None:
    variations = [{"value": {"layout": None, "columns": 2}}, {"value": []}]
    ok(seeded.post("/flags", {"key": "layout", "type": "json", "variations": variations}), 201)
    document = export(seeded)
    assert flag_of(document, "layout")["variations"][0]["value"] == {"layout": None, "columns": 2}
    assert plan(seeded, document)["hasChanges"] is False
    changed = edited(document)
    flag_of(changed, "layout")["variations"][1]["value"] = [None]
    found = plan(seeded, changed)
    (change,) = found["changes"]
    assert [(c["path"], c["before"], c["after"]) for c in change["changes"]] == [
        ("variations[1].value", [], [None])
    ]
    apply(seeded, changed)
    assert export(seeded) == changed


def test_a_segments_contexts_of_other_kinds_round_trip(seeded: Api) -> None:
    """A segment's keys of other context kinds are in the document: exported, planned field by
    field and applied like the rest (an export that left them out would lose them to git)."""
    orgs = [{"contextKind": "org", "values": ["acme"]}]
    ok(seeded.patch("/segments/beta", {"includedContexts": orgs}))
    document = export(seeded)
    beta = next(x for x in document["segments"] if x["key"] == "beta")
    assert beta["includedContexts"] == orgs
    assert plan(seeded, document)["hasChanges"] is False
    beta["excludedContexts"] = [{"contextKind": "org", "values": ["globex"]}]
    found = plan(seeded, document)
    (change,) = found["changes"]
    assert (change["kind"], change["key"], change["action"]) == ("segment", "beta", "update")
    assert [c["path"] for c in change["changes"]] == ["excludedContexts"]
    apply(seeded, document, versions=found["versions"])
    live = ok(seeded.get("/segments/beta"))
    assert live["excludedContexts"] == [{"contextKind": "org", "values": ["globex"]}]
    assert export(seeded) == document
