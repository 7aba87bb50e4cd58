"""Editing a flag after creation: variations added, renamed and re-valued with rules, targets
and what relays serve kept consistent (a variation in use is never removed); ``bucketBy``;
deleting an archived flag. Every edit audited."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create, fields

PROD = "/flags/checkout-flow/environments/production"


def served(api: Api, context: dict[str, Any], env: str = "production") -> Any:
    response = api.post(f"/flags/checkout-flow/environments/{env}/evaluate", {"context": context})
    assert response.status_code == 200, response.text
    return response.json()


def test_variations_edited_keep_rules_targets_and_snapshot_consistent(api: Api) -> None:
    create(api, MULTI)
    rules = {
        "rules": [
            {"clauses": [{"attribute": "country", "op": "in", "values": ["NL"]}], "variation": 2}
        ]
    }
    assert api.put(f"{PROD}/rules", rules).status_code == 200
    settings = {
        "enabled": True,
        "fallthrough": {"variation": 0},
        "targets": [{"variation": 1, "values": ["vip"]}],
    }
    assert api.put(PROD, settings).status_code == 200
    version = api.get(PROD).json()["version"]
    assert served(api, {"targetingKey": "a", "country": "NL"})["value"] == "express"

    edit = {
        "variations": [
            {"idx": 0, "value": "classic", "name": "Classic"},
            {"idx": 1, "value": "one-page", "name": "Single page"},  # renamed
            {"idx": 2, "value": "express-v2", "name": "Express"},  # value changed
            {"value": "drawer", "name": "Drawer"},  # added: next idx
        ]
    }
    changed = api.patch("/flags/checkout-flow", edit)
    assert changed.status_code == 200, changed.text
    flag = changed.json()
    assert [(x["idx"], x["value"], x["name"]) for x in flag["variations"]] == [
        (0, "classic", "Classic"),
        (1, "one-page", "Single page"),
        (2, "express-v2", "Express"),
        (3, "drawer", "Drawer"),
    ]
    # every environment republished; the rule and the target serve the edited variations
    assert api.get(PROD).json()["version"] == version + 1
    nl = served(api, {"targetingKey": "a", "country": "NL"})
    assert (nl["value"], nl["variation"], nl["reason"]) == ("express-v2", 2, "RULE_MATCH")
    vip = served(api, {"targetingKey": "vip"})
    assert (vip["value"], vip["variationName"]) == ("one-page", "Single page")
    # the new variation can be served at once
    rules["rules"][0]["variation"] = 3
    assert api.put(f"{PROD}/rules", rules).status_code == 200
    assert served(api, {"targetingKey": "a", "country": "NL"})["value"] == "drawer"

    # a variation in use is never removed; nothing of the refused edit is written
    in_use = api.patch("/flags/checkout-flow", {"variations": edit["variations"][:3]})
    assert in_use.status_code == 422, in_use.text
    assert fields(in_use) == ["variations"]
    assert "production rules[0]" in in_use.text
    assert len(api.get("/flags/checkout-flow").json()["variations"]) == 4
    # the staging offVariation (2) holds variation 2 too; once free, 1 may go
    without_target = api.put(PROD, {"targets": []})
    assert without_target.status_code == 200
    kept = [x for x in flag["variations"] if x["idx"] != 1]
    removed = api.patch("/flags/checkout-flow", {"variations": kept})
    assert removed.status_code == 200, removed.text
    assert [x["idx"] for x in removed.json()["variations"]] == [0, 2, 3]
    unknown = api.patch("/flags/checkout-flow", {"variations": [*kept, {"idx": 9, "value": "x"}]})
    assert unknown.status_code == 422
    assert fields(unknown) == ["variations[3].idx"]
    wrong_type = api.patch("/flags/checkout-flow", {"variations": [*kept, {"value": 5}]})
    assert wrong_type.status_code == 422
    assert fields(wrong_type) == ["variations[3].value"]

    audit = api.get("/flags/checkout-flow/audit").json()["entries"]
    updates = [e for e in audit if e["action"] == "flag.update"]
    assert [len(e["after"]["variations"]) for e in updates] == [3, 4]
    assert [len(e["before"]["variations"]) for e in updates] == [4, 3]


def test_a_variation_named_by_another_flags_prerequisite_stays(api: Api) -> None:
    create(api, MULTI)
    create(api, {"key": "banner"})
    prerequisite = {"prerequisites": [{"key": "checkout-flow", "variation": 1}]}
    assert api.put("/flags/banner/environments/staging", prerequisite).status_code == 200
    variations = [x for x in MULTI["variations"] if x["idx"] != 1]
    refused = api.patch("/flags/checkout-flow", {"variations": variations})
    assert refused.status_code == 422
    assert "prerequisite of banner (staging)" in refused.text


def test_bucket_by_is_editable_and_republished(api: Api) -> None:
    create(api, MULTI)
    rollout = {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}]}
    assert api.put(PROD, {"enabled": True, "fallthrough": rollout}).status_code == 200
    by_key = {served(api, {"targetingKey": f"user-{i}"})["variation"] for i in range(40)}
    assert by_key == {0, 1}
    changed = api.patch("/flags/checkout-flow", {"bucketBy": "accountId"})
    assert changed.status_code == 200
    assert changed.json()["bucketBy"] == "accountId"
    # users of one account now share a bucket, whatever their key
    one_account = {
        served(api, {"targetingKey": f"user-{i}", "accountId": "acme"})["variation"]
        for i in range(40)
    }
    assert len(one_account) == 1
    blank = api.patch("/flags/checkout-flow", {"bucketBy": " "})
    assert blank.status_code == 422
    assert fields(blank) == ["bucketBy"]
    assert api.get("/flags/checkout-flow").json()["bucketBy"] == "accountId"


def test_only_an_archived_flag_is_deleted(api: Api) -> None:
    create(api, MULTI)
    live = api.delete("/flags/checkout-flow")
    assert live.status_code == 409
    assert api.post("/flags/checkout-flow/archive").status_code == 200
    deleted = api.delete("/flags/checkout-flow")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"key": "checkout-flow", "deleted": True}
    assert api.get("/flags/checkout-flow").status_code == 404
    assert api.get("/flags", params={"archived": "true"}).json()["flags"] == []
    assert api.delete("/flags/checkout-flow").status_code == 404
    entries = api.get("/audit", params={"resourceType": "flag"}).json()["entries"]
    assert entries[0]["action"] == "flag.delete"
    assert entries[0]["before"]["key"] == "checkout-flow"
    # the key is free again, with nothing of the old flag
    again = create(api, {"key": "checkout-flow"})
    assert again["version"] == 1
