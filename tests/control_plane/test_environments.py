"""Environments: listing, creating; a new environment has every flag disabled in it."""

from __future__ import annotations

import pytest

from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create


def test_new_environment_starts_with_every_flag_disabled(api: Api) -> None:
    create(api, MULTI)
    create(api, {"key": "plain"})
    api.post("/flags/plain/environments/production/toggle", {"enabled": True})
    response = api.post("/environments", {"key": "qa", "name": "QA"})
    assert response.status_code == 201, response.text
    env = response.json()
    assert env["key"] == "qa"
    assert env["name"] == "QA"
    assert env["id"].startswith("env_")
    keys = [e["key"] for e in api.get("/environments").json()["environments"]]
    assert keys == ["production", "staging", "qa"]
    for key in ("checkout-flow", "plain"):
        settings = api.get(f"/flags/{key}/environments/qa").json()
        assert settings["enabled"] is False
    assert api.get("/flags/checkout-flow/environments/qa").json()["offVariation"] == 2
    assert api.post("/flags/plain/environments/qa/toggle", {"enabled": True}).status_code == 200


@pytest.mark.parametrize(
    ("body", "status"), [({"key": "QA"}, 422), ({"key": "production"}, 409), ({}, 422)]
)
def test_invalid_or_duplicate_environment(
    refusing_api: Api, body: dict[str, str], status: int
) -> None:
    response = refusing_api.post("/environments", body)
    assert response.status_code == status, response.text
    assert refusing_api.get("/environments").json()["count"] == 2


def test_copy_from_copies_every_flags_settings_rules_and_targets(api: Api) -> None:
    create(api, MULTI)
    create(api, {"key": "plain"})
    staging = "/flags/checkout-flow/environments/staging"
    settings = {
        "enabled": True,
        "offVariation": 0,
        "fallthrough": {"rollout": [{"idx": 1, "weight": 30}, {"idx": 2, "weight": 70}]},
        "targets": [{"variation": 0, "values": ["qa-user"]}],
    }
    assert api.put(staging, settings).status_code == 200
    rules = {
        "rules": [
            {"clauses": [{"attribute": "beta", "op": "in", "values": [True]}], "variation": 1}
        ]
    }
    assert api.put(f"{staging}/rules", rules).status_code == 200
    copied = api.post("/environments", {"key": "qa", "copyFrom": "staging"})
    assert copied.status_code == 201, copied.text
    for flag in ("checkout-flow", "plain"):
        source = api.get(f"/flags/{flag}/environments/staging").json()
        clone = api.get(f"/flags/{flag}/environments/qa").json()
        for field in ("enabled", "offVariation", "fallthrough", "targets", "prerequisites"):
            assert clone[field] == source[field], (flag, field)
        source_rules = api.get(f"/flags/{flag}/environments/staging/rules").json()["rules"]
        assert api.get(f"/flags/{flag}/environments/qa/rules").json()["rules"] == source_rules
    # the copy is independent of its source from now on
    api.post("/flags/checkout-flow/environments/qa/toggle", {"enabled": False})
    assert api.get(staging).json()["enabled"] is True
    entry = api.get("/audit", params={"resourceType": "environment"}).json()["entries"][0]
    assert entry["action"] == "environment.create"
    assert entry["after"]["copyFrom"] == "staging"
    missing = api.post("/environments", {"key": "qa2", "copyFrom": "nowhere"})
    assert missing.status_code == 404
    assert api.get("/environments").json()["count"] == 3


def test_rename_keeps_keys_and_settings_and_takes_if_match(api: Api) -> None:
    create(api, {"key": "plain"})
    api.post("/flags/plain/environments/staging/toggle", {"enabled": True})
    key = api.post("/keys", {"kind": "public", "environment": "staging"}).json()
    env = api.get("/environments/staging")
    assert env.headers["ETag"] == '"1"'
    renamed = api.patch("/environments/staging", {"key": "preview"}, headers={"If-Match": '"1"'})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["key"] == "preview"
    assert renamed.headers["ETag"] == '"2"'
    assert api.get("/environments/staging").status_code == 404
    assert api.get("/flags/plain/environments/preview").json()["enabled"] is True
    listed = api.get("/keys", params={"environment": "preview"}).json()["keys"]
    assert [k["id"] for k in listed] == [key["id"]]
    stale = api.patch("/environments/preview", {"name": "Lost"}, headers={"If-Match": '"1"'})
    assert stale.status_code == 412
    assert api.patch("/environments/preview", {"key": "production"}).status_code == 409
    assert api.patch("/environments/preview", {"key": "Bad Key"}).status_code == 422
    entry = api.get("/audit", params={"resourceType": "environment"}).json()["entries"][0]
    assert (entry["action"], entry["before"]["key"], entry["after"]["key"]) == (
        "environment.rename",
        "staging",
        "preview",
    )


def test_delete_is_refused_while_keys_are_bound_unless_they_are_revoked(api: Api) -> None:
    create(api, {"key": "plain"})
    assert api.post("/environments", {"key": "qa"}).status_code == 201
    key = api.post("/keys", {"kind": "public", "environment": "qa"}).json()
    refused = api.delete("/environments/qa")
    assert refused.status_code == 409
    assert key["id"] in refused.text
    assert api.get("/flags/plain/environments/qa").status_code == 200
    deleted = api.delete("/environments/qa", params={"revokeKeys": "true"})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"key": "qa", "deleted": True, "revokedKeys": [key["id"]]}
    assert api.get("/environments/qa").status_code == 404
    assert api.get("/flags/plain/environments/qa").status_code == 404
    assert "qa" not in api.get("/flags/plain").json()["environments"]
    # the revoked key no longer opens anything
    assert api.get("/flags", key=key["key"]).status_code == 401
    actions = [e["action"] for e in api.get("/audit").json()["entries"][:2]]
    assert actions == ["environment.delete", "key.revoke"]
    assert api.delete("/environments/staging").status_code == 200
    last = api.delete("/environments/production", params={"revokeKeys": "true"})
    assert last.status_code == 409
    assert "last" in last.text
