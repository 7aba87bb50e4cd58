"""Keys in the project document (issue #36): an inventory of names, kinds, environments and
roles, sorted, never a token nor its hint; plan and apply never issue or revoke a key, and a key
in the file that is not live is a note."""

from __future__ import annotations

import json

from tests.conftest import Api
from tests.projectfile.conftest import apply, edited, export, ok, plan


def test_keys_are_exported_without_their_secrets(api: Api) -> None:
    made = ok(
        api.post("/keys", {"kind": "server", "name": "checkout service", "environment": "staging"}),
        201,
    )
    ci = ok(api.post("/keys", {"kind": "management", "name": "ci", "role": "editor"}), 201)
    document = export(api)
    keys = document["keys"]
    assert {"kind": "server", "name": "checkout service", "environment": "staging"} in keys
    assert {"kind": "management", "name": "ci", "role": "editor"} in keys
    assert keys == sorted(keys, key=lambda k: (k["kind"], k.get("environment", ""), k["name"]))
    text = api.get("/export", params={"format": "yaml"}).text + json.dumps(document)
    for secret in (made["key"], ci["key"], *api.keys.values()):
        assert secret not in text
    for hint in (made["hint"], ci["hint"]):
        assert hint not in text
    assert plan(api, document)["hasChanges"] is False
    assert export(api) == document


def test_keys_are_never_issued_nor_revoked_by_a_document(api: Api) -> None:
    ok(api.post("/keys", {"kind": "relay", "name": "edge"}), 201)
    document = export(api)
    before = ok(api.get("/keys"))["keys"]
    changed = edited(document)
    changed["keys"] = [k for k in changed["keys"] if k["name"] != "edge"]
    changed["keys"].append({"kind": "public", "name": "web", "environment": "production"})
    found = plan(api, changed, prune=True)
    assert found["hasChanges"] is False
    assert found["changes"] == []
    (note,) = found["notes"]
    assert note.startswith(
        f"keys[{len(changed['keys']) - 1}]: no live public key web in production"
    )
    assert "POST /keys" in note
    done = apply(api, changed, prune=True)
    assert done["applied"] is False
    assert ok(api.get("/keys"))["keys"] == before  # none issued, none revoked
    assert export(api) == document


def test_a_bad_key_entry_is_refused_naming_its_path(api: Api) -> None:
    document = export(api)
    changed = edited(document)
    changed["keys"].append({"kind": "master", "name": "x"})
    refused = api.post("/plan", {"document": changed})
    assert refused.status_code == 422, refused.text
    (detail,) = refused.json()["error"]["details"]
    assert detail["field"] == f"keys[{len(changed['keys']) - 1}].kind"
    assert export(api) == document


def test_the_schema_describes_keys_without_a_secret(api: Api) -> None:
    body = ok(api.client.get("/schema/project.json"))
    key = body["$defs"]["KeyDoc"]
    assert set(key["properties"]) == {"kind", "name", "environment", "role"}
    assert "keys" in body["$defs"]["ProjectDoc"]["properties"]
