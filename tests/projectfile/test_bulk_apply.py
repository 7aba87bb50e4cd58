"""A document of a few hundred flags in three environments (issue #36's scale, smaller): one
apply publishes each environment once, audits every change as applied from the file, and a
bad flag among them still refuses the whole document, named by its path, nothing written."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.benchmarks.bench_projectfile import ENVIRONMENTS, document
from tests.conftest import Api
from tests.projectfile.conftest import apply, export, ok, plan
from tests.webhooks.conftest import eventually, hooks_app
from tests.webhooks.receiver import receiving

FLAGS = 200
SECRET = "whsec_test_0123456789abcdef"


def snapshot_versions(api: Api) -> dict[str, int]:
    found = ok(api.get("/environments"))["environments"]
    return {e["key"]: int(e["snapshotVersion"]) for e in found}


def audit_entries(api: Api) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = ok(api.get("/audit", params=params))
        entries += page["entries"]
        cursor = page.get("nextCursor")
        if not cursor:
            return entries


def test_an_apply_publishes_each_environment_once_and_audits_every_change(api: Api) -> None:
    doc = document(FLAGS)
    before = snapshot_versions(api)
    audited = len(audit_entries(api))
    found = plan(api, doc)
    assert snapshot_versions(api) == before  # a plan writes nothing
    done = apply(api, doc, versions=found["versions"], fileName="flags.yaml")
    assert done["applied"] is True
    after = snapshot_versions(api)
    assert set(after) == set(ENVIRONMENTS)
    assert {k: after[k] - before[k] for k in before} == {"staging": 1, "production": 1}
    qa = after["qa"]  # made by the document, then its flags written: published once since
    new = audit_entries(api)[: len(audit_entries(api)) - audited]
    assert all(e["after"]["appliedFrom"] == "flags.yaml" for e in new)
    actions = Counter((e["action"], e["environment"]) for e in new)
    assert actions[("flag.create", None)] == FLAGS
    assert actions[("segment.create", None)] == 20
    for env in ENVIRONMENTS:
        assert actions[("flag.settings.update", env)] == FLAGS
        assert actions[("flag.rules.update", env)] == FLAGS
    assert plan(api, doc)["hasChanges"] is False

    doc["flags"][7]["environments"]["production"]["enabled"] ^= True
    doc["flags"][8]["environments"]["qa"]["enabled"] ^= True
    apply(api, doc)
    moved = snapshot_versions(api)
    assert moved == {**after, "production": after["production"] + 1, "qa": qa + 1}


def test_a_bad_flag_among_hundreds_refuses_the_document(api: Api) -> None:
    doc = document(FLAGS)
    doc["flags"][150]["environments"]["staging"]["rules"][0]["serve"]["variation"] = 9
    before = (snapshot_versions(api), export(api))
    refused = api.post("/apply", {"document": doc, "fileName": "flags.yaml"})
    assert refused.status_code == 422, refused.text
    fields = [d["field"] for d in refused.json()["error"]["details"]]
    assert fields == ["flags[150].environments.staging.rules[0].serve.variation"]
    assert (snapshot_versions(api), export(api)) == before


def test_an_apply_is_sent_to_the_webhooks_as_each_write_of_the_api_is(database_url: str) -> None:
    """The audit entries of an apply are written together, and so are their webhook events
    (none while the project has no webhook: the dispatcher would drop them)."""
    with hooks_app(database_url) as api, receiving(SECRET) as receiver:
        made = api.post("/webhooks", {"url": receiver.url, "events": ["flag.*"], "secret": SECRET})
        assert made.status_code == 201, made.text
        doc = document(3)
        apply(api, doc, fileName="flags.yaml")
        wanted = ["flag.created"] * 3 + ["flag.updated"] * 3 * 2 * len(ENVIRONMENTS)
        eventually(lambda: receiver.types() == sorted(wanted), what="the apply's events")
        sent = receiver.unique().values()
        audit_ids = {e["id"] for e in audit_entries(api)}
        assert {p["data"]["auditId"] for p in sent} <= audit_ids
        assert all(p["data"]["after"]["appliedFrom"] == "flags.yaml" for p in sent)
        created = sorted(p["data"]["resource"]["key"] for p in sent if p["type"] == "flag.created")
        assert created == [f["key"] for f in doc["flags"]]
