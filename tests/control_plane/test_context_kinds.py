"""Context kinds through the API (issue #23): rules, targets and rollouts name the kind they
read, validation names the field, and the preview evaluates multi-kind contexts."""

from __future__ import annotations

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create
from tests.control_plane.test_preview import preview

RULES = "/flags/checkout-flow/environments/staging/rules"
SETTINGS = "/flags/checkout-flow/environments/staging"
ACME_USER = {
    "kind": "multi",
    "user": {"key": "u1"},
    "organization": {"key": "acme", "plan": "enterprise", "address": {"city": "Lyon"}},
}


def test_a_rule_on_the_organization_serves_every_user_of_an_enterprise_account(api: Api) -> None:
    create(api, MULTI)
    assert api.put(SETTINGS, {"enabled": True}).status_code == 200
    rule = {
        "id": "enterprise",
        "clauses": [
            {"contextKind": "organization", "attribute": "plan", "values": ["enterprise"]},
            {"contextKind": "organization", "attribute": "/address/city", "values": ["Lyon"]},
        ],
        "variation": 2,
    }
    put = api.put(RULES, {"rules": [rule]})
    assert put.status_code == 200, put.text
    clauses = put.json()["rules"][0]["clauses"]
    assert clauses[0]["contextKind"] == "organization"
    assert clauses[1]["attribute"] == "/address/city"
    assert preview(api, ACME_USER)["reason"] == "RULE_MATCH"
    # a user who says plan=enterprise of itself is not an enterprise organization
    assert preview(api, {"key": "u1", "plan": "enterprise"})["reason"] == "FALLTHROUGH"
    flat = preview(api, {"kind": "organization", "key": "acme", "plan": "enterprise"})
    assert flat["reason"] == "FALLTHROUGH"  # no /address/city


def test_targets_and_rollouts_name_their_kind(api: Api) -> None:
    create(api, MULTI)
    body = {
        "enabled": True,
        "targets": [
            {"variation": 2, "values": ["acme"], "contextKind": "organization"},
            {"variation": 1, "values": ["acme"]},  # the same key of another kind: no conflict
        ],
        "fallthrough": {
            "rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 50}],
            "contextKind": "organization",
        },
    }
    put = api.put(SETTINGS, body)
    assert put.status_code == 200, put.text
    assert put.json()["targets"][0]["contextKind"] == "organization"
    assert "contextKind" not in put.json()["targets"][1]
    assert put.json()["fallthrough"]["contextKind"] == "organization"
    assert preview(api, ACME_USER)["variation"] == 2
    assert preview(api, {"key": "acme"})["variation"] == 1  # a user named acme
    # every user of one organization gets the organization's bucket
    served = {
        preview(api, {**ACME_USER, "organization": {"key": "globex"}, "user": {"key": f"u{i}"}})[
            "variation"
        ]
        for i in range(12)
    }
    assert len(served) == 1


def test_kinds_and_references_that_cannot_be_are_refused_naming_the_field(api: Api) -> None:
    create(api, MULTI)
    bad = api.put(
        RULES,
        {
            "rules": [
                {
                    "clauses": [
                        {"contextKind": "multi", "attribute": "plan", "values": ["x"]},
                        {"contextKind": "organization", "attribute": "/a//b", "values": ["x"]},
                        {"segment": "beta", "contextKind": "organization"},
                    ],
                    "variation": 1,
                }
            ]
        },
    )
    assert bad.status_code == 422, bad.text
    fields = {d["field"] for d in bad.json()["error"]["details"]}
    assert {
        "rules[0].clauses[0].contextKind",
        "rules[0].clauses[1].attribute",
        "rules[0].clauses[2].contextKind",
    } <= fields
    fixed = api.put(SETTINGS, {"fallthrough": {"variation": 1, "contextKind": "organization"}})
    assert fixed.status_code == 422
    assert fixed.json()["error"]["details"][0]["field"] == "fallthrough.contextKind"
    segment = api.post(
        "/segments",
        {
            "key": "half-of-teams",
            "rules": [
                {
                    "clauses": [{"attribute": "plan", "values": ["team"]}],
                    "weight": 50,
                    "bucketBy": "/a~",
                    "contextKind": "organization",
                }
            ],
        },
    )
    assert segment.status_code == 422
    assert segment.json()["error"]["details"][0]["field"] == "rules[0].bucketBy"
    # a literal name is still a literal name where no kind is named (rules written before kinds)
    old = api.put(
        RULES, {"rules": [{"clauses": [{"attribute": "/a//b", "values": ["x"]}], "variation": 1}]}
    )
    assert old.status_code == 200, old.text


def test_an_experiment_randomized_on_accounts_counts_accounts(api: Api) -> None:
    """Assignment, exposures and events of an experiment on ``organization`` use the
    organization's key: every user of an account shares one unit, and results count accounts."""
    created = api.post(
        "/experiments",
        {"name": "Team checkout", "type": "manual", "goal": "upgrade", "unitKind": "organization"},
    )
    assert created.status_code == 201, created.text
    assert created.json()["unitKind"] == "organization"
    assert api.post("/experiments/team-checkout", {"status": "running"}).status_code in (200, 409)
    variants: dict[str, str] = {}
    for account in ("acme", "globex", "initech"):
        for _ in range(2):  # two users of each account ask: one unit
            answer = api.post("/experiments/team-checkout/assign", {"unit": account})
            assert answer.status_code == 200, answer.text
            variants.setdefault(account, answer.json()["variant"])
            assert answer.json()["variant"] == variants[account]
    wrong = api.post("/experiments/team-checkout/assign", {"unit": "acme", "unitKind": "user"})
    assert wrong.status_code == 422
    assert wrong.json()["error"]["details"][0]["field"] == "unitKind"
    server = api.keys["server"]
    event = {"unit": "acme", "unitKind": "organization", "event": "upgrade", "value": 100}
    assert api.post("/track", event, key=server).status_code == 200
    user_event = {"unit": "acme", "event": "upgrade"}  # the user acme: another unit
    assert api.post("/track", user_event, key=server).status_code == 200
    stored = api.get("/events", params={"unit": "organization:acme"}).json()["events"]
    assert [e["event"] for e in stored] == ["upgrade"]
    results = api.get("/experiments/team-checkout").json()["results"]
    assert sum(v["exposed"] for v in results["variants"]) == 3  # three accounts
    assert sum(v["conversions"] for v in results["variants"]) == 1
    # a backend's claim of an account's exposure is checked against the account's variant
    other = next(v for v in ("control", "treatment") if v != variants["acme"])
    claim = {
        "unit": "acme",
        "unitKind": "organization",
        "event": "$exposure",
        "props": {"experiment": "team-checkout", "variant": other},
    }
    refused = api.post("/track", claim, key=server)
    assert refused.status_code == 422, refused.text
    claim["props"]["variant"] = variants["acme"]  # type: ignore[index]
    assert api.post("/track", claim, key=server).status_code == 200


def test_event_unit_kinds_are_checked_naming_the_field(api: Api) -> None:
    bad = api.post(
        "/track", {"unit": "acme", "unitKind": "multi", "event": "x"}, key=api.keys["server"]
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "unitKind"
    long = api.post(
        "/track",
        {"unit": "a" * 195, "unitKind": "organization", "event": "x"},
        key=api.keys["server"],
    )
    assert long.status_code == 422
    assert long.json()["error"]["details"][0]["field"] == "unit"
    kind = api.post(
        "/experiments", {"name": "Bad kind", "type": "manual", "goal": "g", "unitKind": "a b"}
    )
    assert kind.status_code == 422
    assert kind.json()["error"]["details"][0]["field"] == "unitKind"
