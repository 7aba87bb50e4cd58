"""Webhooks in the project document (issue #36): named by their url, exported sorted by it and
never with their secrets; planned and applied through the webhooks' services (under the
instance's address policy); one made from a document has a generated secret that is never
shown, which the plan's notes say how to set."""

from __future__ import annotations

import json

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, ok, plan

SECRET = "a-secret-nobody-may-read-0123456789"


def _seed(api: Api) -> None:
    ok(
        api.post(
            "/webhooks",
            {
                "url": "https://hooks.example.com/vane",
                "events": ["flag.*"],
                "secret": SECRET,
                "description": "chat",
            },
        ),
        201,
    )
    ok(api.post("/webhooks", {"url": "https://audit.example.com/in", "events": ["*"]}), 201)


def test_webhooks_are_exported_by_url_without_their_secrets(api: Api) -> None:
    _seed(api)
    generated = ok(api.post("/webhooks", {"url": "https://b.example.com/", "events": ["*"]}), 201)
    document = export(api)
    assert document["webhooks"] == [
        {
            "url": "https://audit.example.com/in",
            "events": ["*"],
            "description": "",
            "enabled": True,
        },
        {"url": "https://b.example.com/", "events": ["*"], "description": "", "enabled": True},
        {
            "url": "https://hooks.example.com/vane",
            "events": ["flag.*"],
            "description": "chat",
            "enabled": True,
        },
    ]
    for response in (api.get("/export"), api.get("/export", params={"format": "yaml"})):
        assert SECRET not in response.text
        assert generated["secret"] not in response.text
        assert "secret" not in response.text.lower()
    assert plan(api, document)["hasChanges"] is False
    assert export(api) == document


def test_an_edit_plans_to_that_edit_and_applies(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    changed["webhooks"][1]["enabled"] = False
    changed["webhooks"][1]["events"] = ["flag.*", "segment.*", "flag.*"]
    found = plan(api, changed)
    (change,) = found["changes"]
    assert (change["kind"], change["key"], change["action"]) == (
        "webhook",
        "https://hooks.example.com/vane",
        "update",
    )
    assert {c["path"] for c in change["changes"]} == {"enabled", "events"}
    assert found["notes"] == []
    apply(api, changed, versions=found["versions"])
    changed["webhooks"][1]["events"] = ["flag.*", "segment.*"]  # stored once each
    assert export(api) == changed
    assert plan(api, changed)["hasChanges"] is False
    hooks = ok(api.get("/webhooks"))["webhooks"]
    kept = next(h for h in hooks if h["url"] == "https://hooks.example.com/vane")
    assert kept["secretHint"] == "…" + SECRET[-4:]  # its secret is left as it is


def test_a_new_webhook_gets_a_secret_the_notes_say_how_to_set(api: Api) -> None:
    _seed(api)
    changed = edited(export(api))
    changed["webhooks"].append({"url": "https://new.example.com/hook", "events": ["experiment.*"]})
    found = plan(api, changed)
    assert [(c["key"], c["action"]) for c in found["changes"]] == [
        ("https://new.example.com/hook", "create")
    ]
    (note,) = found["notes"]
    assert "https://new.example.com/hook" in note
    assert "PATCH /webhooks/{id}" in note
    done = apply(api, changed, versions=found["versions"])
    assert done["plan"]["notes"] == [note]
    assert "whsec_" not in json.dumps(done)  # the generated secret is never answered
    made = next(
        h
        for h in ok(api.get("/webhooks"))["webhooks"]
        if h["url"] == "https://new.example.com/hook"
    )
    assert made["secretHint"].startswith("…")
    ok(api.patch(f"/webhooks/{made['id']}", {"secret": "now-the-team-knows-it-1234"}))
    assert plan(api, changed)["hasChanges"] is False

    pruned = edited(changed)
    pruned["webhooks"] = [w for w in pruned["webhooks"] if "audit" not in w["url"]]
    found = plan(api, pruned, prune=True)
    assert [(c["key"], c["action"]) for c in found["changes"]] == [
        ("https://audit.example.com/in", "delete")
    ]
    apply(api, pruned, prune=True, versions=found["versions"])
    assert [w["url"] for w in export(api)["webhooks"]] == [
        "https://hooks.example.com/vane",
        "https://new.example.com/hook",
    ]


def test_a_bad_webhook_is_refused_naming_its_path(api: Api) -> None:
    _seed(api)
    document = export(api)
    changed = edited(document)
    changed["webhooks"].append({"url": "http://127.0.0.1:9/hook", "events": ["*"]})
    changed["webhooks"][0]["events"] = ["nothing.matches"]
    refused = api.post("/apply", {"document": changed})
    assert refused.status_code == 422, refused.text
    fields = [d["field"] for d in refused.json()["error"]["details"]]
    assert fields == ["webhooks[0].events[0]"]  # the first step refused names its path
    changed["webhooks"][0]["events"] = ["*"]
    refused = api.post("/plan", {"document": changed})
    assert refused.status_code == 422, refused.text
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["webhooks[2].url"]
    twice = edited(document)
    twice["webhooks"].append(twice["webhooks"][0])
    refused = api.post("/plan", {"document": twice})
    assert [d["field"] for d in refused.json()["error"]["details"]] == ["webhooks[2].url"]
    assert export(api) == document  # nothing written


def test_two_webhooks_with_one_url_are_refused_until_one_goes(api: Api) -> None:
    _seed(api)
    ok(api.post("/webhooks", {"url": "https://audit.example.com/in", "events": ["flag.*"]}), 201)
    document = export(api)
    assert [w["url"] for w in document["webhooks"]].count("https://audit.example.com/in") == 2
    document["webhooks"] = document["webhooks"][1:]
    refused = api.post("/plan", {"document": document})
    assert refused.status_code == 422, refused.text
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == "webhooks[0].url"
    assert "2 webhooks have this url" in detail["message"]


def test_the_schema_describes_webhooks_without_a_secret(api: Api) -> None:
    body = ok(api.client.get("/schema/project.json"))
    webhook = body["$defs"]["WebhookDoc"]
    assert set(webhook["required"]) == {"url", "events"}
    assert "secret" not in webhook["properties"]
    assert "webhooks" in body["$defs"]["ProjectDoc"]["properties"]
