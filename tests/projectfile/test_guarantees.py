"""What apply promises (issue #36): it refuses when anything moved since the plan, refuses bad
documents naming their path with nothing written, opens a change request where approval is
required, records every change as applied from the file, and prunes only when asked."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, flag_of, ok, plan


def audit(api: Api) -> list[dict[str, Any]]:
    return ok(api.get("/audit", params={"limit": 200}))["entries"]  # type: ignore[no-any-return]


def test_a_change_between_plan_and_apply_makes_apply_refuse(seeded: Api) -> None:
    changed = edited(export(seeded))
    flag_of(changed, "checkout")["environments"]["staging"]["enabled"] = False
    found = plan(seeded, changed)
    ok(seeded.patch("/flags/checkout", {"description": "edited by hand"}))
    before = export(seeded)
    refused = seeded.post(
        "/apply", {"document": changed, "versions": found["versions"], "fileName": "a.yaml"}
    )
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "moved_since_plan"
    assert error["details"] == [
        {"field": "flag:checkout", "message": "version 1 when planned, now 2"}
    ]
    assert export(seeded) == before  # nothing written


def test_an_unrelated_change_does_not_stop_an_apply(seeded: Api) -> None:
    changed = edited(export(seeded))
    changed["flags"] = [flag_of(changed, "checkout")]
    flag_of(changed, "checkout")["description"] = "from git"
    found = plan(seeded, changed)
    ok(seeded.patch("/flags/login", {"description": "not in the file"}))
    assert apply(seeded, changed, versions=found["versions"])["applied"] is True


BAD: list[tuple[str, Any, str]] = [
    (
        "unknown field",
        ("flags", 0, "environments", "staging", "colour"),
        "flags[0].environments.staging.colour",
    ),
    (
        "wrong type",
        ("flags", 0, "environments", "staging", "rules", 0, "serve", "variation"),
        "flags[0].environments.staging.rules[0].serve.variation",
    ),
    (
        "out of range",
        ("flags", 0, "environments", "staging", "rules", 0, "serve", "variation"),
        "flags[0].environments.staging.rules[0].serve.variation",
    ),
    (
        "cycle",
        ("flags", 1, "environments", "staging", "prerequisites"),
        "flags[1].environments.staging.prerequisites",
    ),
    (
        "unknown segment",
        ("flags", 0, "environments", "staging", "rules", 0, "clauses", 0, "values", 0),
        "flags[0].environments.staging.rules[0].clauses[0].values[0]",
    ),
    ("type changed", ("flags", 1, "type"), "flags[1].type"),
    (
        "too many approvals",
        ("environments", 0, "requiredApprovals"),
        "environments[0].requiredApprovals",
    ),
]
VALUES = {
    "unknown field": "blue",
    "wrong type": "2",
    "out of range": 7,
    "cycle": [{"key": "checkout", "variation": 0}],
    "unknown segment": "nobody",
    "type changed": "string",
    "too many approvals": 6,
}


def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


@pytest.mark.parametrize(("case", "where", "named"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_document_is_refused_naming_its_path(
    seeded: Api, case: str, where: tuple[Any, ...], named: str
) -> None:
    document = export(seeded)
    assert [f["key"] for f in document["flags"]] == ["checkout", "login"]
    bad = edited(document)
    flag_of(bad, "checkout")["description"] = "a change that must not be written"
    _set(bad, where, VALUES[case])
    entries = len(audit(seeded))
    for path in ("/plan", "/apply"):
        refused = seeded.post(path, {"document": bad})
        assert refused.status_code == 422, refused.text
        fields = [d["field"] for d in refused.json()["error"]["details"]]
        assert named in fields, fields
    assert export(seeded) == document
    assert len(audit(seeded)) == entries


def test_a_too_large_body_is_refused_and_nothing_written(seeded: Api) -> None:
    document = export(seeded)
    flag_of(document, "checkout")["description"] = "x" * (33 << 20)
    refused = seeded.post("/apply", {"document": document})
    assert refused.status_code == 413
    assert flag_of(export(seeded), "checkout")["description"] == ""


def test_a_protected_environment_gets_a_change_request(seeded: Api) -> None:
    ok(seeded.patch("/environments/production", {"requiredApprovals": 1}))
    changed = edited(export(seeded))
    checkout = flag_of(changed, "checkout")
    checkout["environments"]["production"]["enabled"] = True
    checkout["environments"]["staging"]["enabled"] = False
    found = plan(seeded, changed)
    actions = {(c["environment"], c["action"]) for c in found["changes"]}
    assert actions == {("production", "propose"), ("staging", "update")}
    done = apply(seeded, changed, versions=found["versions"])
    (request,) = done["changeRequests"]
    assert (request["environment"], request["flags"]) == ("production", ["checkout"])
    assert "production requires approval" in done["message"]
    assert request["id"] in done["message"]
    opened = ok(seeded.get(f"/change-requests/{request['id']}"))
    assert opened["status"] == "open"
    assert opened["title"] == "Applied from vane.yaml"
    assert [d["field"] for d in opened["changes"][0]["diff"] if d["changed"]] == ["enabled"]
    assert ok(seeded.get("/flags/checkout/environments/production"))["enabled"] is False
    assert ok(seeded.get("/flags/checkout/environments/staging"))["enabled"] is False
    again = apply(seeded, changed)  # twice is once: the same request, not a second one
    assert again["applied"] is False
    assert [(r["id"], r["alreadyOpen"]) for r in again["changeRequests"]] == [(request["id"], True)]
    listed = ok(seeded.get("/change-requests", params={"status": "open"}))
    assert [r["id"] for r in listed["changeRequests"]] == [request["id"]]


def test_a_flags_own_change_where_an_environment_is_protected_is_proposed(seeded: Api) -> None:
    """bucketBy, clientSide, a variation's value and archiving reach every environment: where one
    is protected they are proposed (one item of the flag itself), while words are written."""
    ok(seeded.patch("/environments/production", {"requiredApprovals": 1}))
    changed = edited(export(seeded))
    flag_of(changed, "login")["bucketBy"] = "account"
    flag_of(changed, "login")["description"] = "signing in"
    flag_of(changed, "checkout")["archived"] = True
    found = plan(seeded, changed)
    proposed = {(c["key"], c["environment"]) for c in found["changes"] if c["action"] == "propose"}
    assert proposed == {("checkout", "production"), ("login", "production")}
    done = apply(seeded, changed, versions=found["versions"])
    (request,) = done["changeRequests"]
    opened = ok(seeded.get(f"/change-requests/{request['id']}"))
    items = {c["flag"]: (c["flagPatch"], c["archived"]) for c in opened["changes"]}
    assert items == {
        "login": ({"description": "signing in", "bucketBy": "account"}, None),
        "checkout": (None, True),
    }
    assert ok(seeded.get("/flags/login"))["bucketBy"] == "key"  # proposed, not written
    assert ok(seeded.get("/flags/checkout"))["archived"] is False
    flag_of(changed, "login")["bucketBy"] = "key"  # words alone are written at once
    flag_of(changed, "checkout")["archived"] = False
    apply(seeded, changed)
    assert ok(seeded.get("/flags/login"))["description"] == "signing in"


def test_a_segment_a_protected_environment_uses_is_proposed(seeded: Api) -> None:
    ok(
        seeded.put(
            "/flags/login/environments/production/rules",
            {"rules": [{"clauses": [{"segment": "beta"}], "variation": 1}]},
        )
    )
    ok(seeded.patch("/environments/production", {"requiredApprovals": 2}))
    changed = edited(export(seeded))
    beta = next(x for x in changed["segments"] if x["key"] == "beta")
    beta["included"] = ["u1", "u9"]
    done = apply(seeded, changed)
    (request,) = done["changeRequests"]
    assert (request["environment"], request["segments"], request["flags"]) == (
        "production",
        ["beta"],
        [],
    )
    assert ok(seeded.get("/segments/beta"))["included"] == ["u1"]


def test_every_change_is_audited_as_applied_from_the_file(seeded: Api) -> None:
    changed = edited(export(seeded))
    flag_of(changed, "login")["tags"] = ["auth"]
    flag_of(changed, "login")["environments"]["staging"]["enabled"] = True
    entries = len(audit(seeded))
    apply(seeded, changed)
    new = audit(seeded)[: len(audit(seeded)) - entries]
    assert {e["action"] for e in new} == {"flag.update", "flag.settings.update"}
    assert all(e["after"]["appliedFrom"] == "vane.yaml" for e in new)
    assert all(e["actor"] == new[0]["actor"] for e in new)


def test_prune_archives_flags_and_deletes_segments_not_in_the_file(seeded: Api) -> None:
    ok(seeded.post("/segments", {"key": "unused"}), 201)
    changed = edited(export(seeded))
    changed["flags"] = [f for f in changed["flags"] if f["key"] == "login"]
    flag_of(changed, "login")["environments"]["staging"]["prerequisites"] = []
    changed["segments"] = [x for x in changed["segments"] if x["key"] == "beta"]
    without = plan(seeded, changed)
    assert without["hasChanges"] is False  # what is not in the file is left alone
    pruned = plan(seeded, changed, prune=True)
    assert {(c["kind"], c["key"], c["action"]) for c in pruned["changes"]} == {
        ("flag", "checkout", "archive"),
        ("segment", "unused", "delete"),
    }
    apply(seeded, changed, prune=True, versions=pruned["versions"])
    assert ok(seeded.get("/flags/checkout"))["archived"] is True
    assert seeded.get("/segments/unused").status_code == 404


def test_the_document_schema_is_published(seeded: Api) -> None:
    schema = seeded.client.get("/schema/project.json")
    assert schema.status_code == 200
    body = schema.json()
    assert body["$ref"] == "#/$defs/ProjectDoc"
    setting = body["$defs"]["FlagEnvironmentDoc"]
    assert set(setting["required"]) == {"enabled", "offVariation", "fallthrough"}
    assert "rules" in setting["properties"]
    approvals = body["$defs"]["EnvironmentDoc"]["properties"]["requiredApprovals"]
    assert (approvals["minimum"], approvals["maximum"]) == (0, 5)


def test_one_apply_is_published_once_with_each_environment_once(
    seeded: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher = seeded.client.app.state.publisher
    published: list[Any] = []
    original = publisher.publish

    def recording(change: Any) -> None:
        published.append(change)
        original(change)

    monkeypatch.setattr(publisher, "publish", recording)
    changed = edited(export(seeded))
    for key in ("checkout", "login"):
        staging = flag_of(changed, key)["environments"]["staging"]
        staging["offVariation"] = 0 if staging["offVariation"] else 1
    flag_of(changed, "login")["environments"]["production"]["enabled"] = True
    apply(seeded, changed)
    (change,) = published
    envs = {e["key"]: e["id"] for e in ok(seeded.get("/environments"))["environments"]}
    assert set(change.environments) == {envs["staging"], envs["production"]}
    assert change.environments[envs["staging"]].flags == {"checkout", "login"}


def test_a_chain_of_prerequisites_longer_than_any_stack_is_refused_naming_its_path(
    seeded: Api,
) -> None:
    """A document whose flags each need the next, 1,500 deep: the plan orders them with a walk
    of its own (a recursive one overflowed Python's stack, a 500), and the engine refuses the
    nesting at the flag that starts it, with nothing written."""
    document = export(seeded)
    chain = 1500
    for i in range(chain):
        needs = [{"key": f"chain-{i + 1}", "variation": 0}] if i + 1 < chain else []
        document["flags"].append(
            {
                "key": f"chain-{i}",
                "type": "boolean",
                "variations": [{"value": True}, {"value": False}],
                "environments": {
                    "staging": {
                        "enabled": True,
                        "offVariation": 1,
                        "fallthrough": {"variation": 0},
                        "prerequisites": needs,
                    }
                },
            }
        )
    for path in ("/plan", "/apply"):
        refused = seeded.post(path, {"document": document})
        assert refused.status_code == 422, refused.text[:2000]
        message = refused.json()["error"]["message"]
        assert "nested more than" in message, message
        assert message.startswith("flags["), message
    assert [f["key"] for f in export(seeded)["flags"]] == ["checkout", "login"]


def test_the_cycle_collector_runs_again_after_every_document_request(seeded: Api) -> None:
    """A document's request pauses Python's cycle collector from its body to its answer
    (``paused_per_request``); whatever the answer (a plan, a refusal, a body too large, an
    export), the collector runs again once it is sent."""
    assert gc.isenabled()
    document = export(seeded)
    assert seeded.post("/plan", {"document": document}).status_code == 200
    assert gc.isenabled()
    undecodable, refused = edited(document), edited(document)
    flag_of(undecodable, "checkout")["variations"] = "none"
    flag_of(refused, "checkout")["type"] = "boolean"  # a flag's type never changes
    for bad in (undecodable, refused):
        assert seeded.post("/plan", {"document": bad}).status_code == 422
        assert seeded.post("/apply", {"document": bad}).status_code == 422
    assert gc.isenabled()
    assert seeded.post("/apply", {"document": {"flags": "x" * (33 << 20)}}).status_code == 413
    assert seeded.get("/export").status_code == 200
    assert gc.isenabled()
