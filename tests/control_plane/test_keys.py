"""Issuing, listing and revoking API keys."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api


def test_first_start_issues_one_key_of_each_kind(api: Api) -> None:
    assert set(api.keys) == {"management", "server", "relay", "public"}
    assert api.keys["management"].startswith("vsk_live_")
    assert api.keys["server"].startswith("ssk_live_")
    assert api.keys["relay"].startswith("rsk_live_")
    assert api.keys["public"].startswith("pk_live_")
    envs = api.get("/environments").json()
    assert [e["key"] for e in envs["environments"]] == ["production", "staging"]


@pytest.mark.parametrize(
    ("body", "prefix"),
    [
        ({"kind": "management", "name": "ci"}, "vsk_live_"),
        ({"kind": "server"}, "ssk_live_"),
        ({"kind": "server", "environment": "production"}, "ssk_live_"),
        ({"kind": "relay", "environment": "staging"}, "rsk_live_"),
        (
            {"kind": "public", "environment": "production", "origins": ["https://shop.example"]},
            "pk_live_",
        ),
    ],
)
def test_create_key_shows_the_secret_once(api: Api, body: dict[str, object], prefix: str) -> None:
    response = api.post("/keys", body)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["key"].startswith(prefix)
    assert created["kind"] == body["kind"]
    assert created["id"].startswith("key_")
    assert created["hint"].startswith(prefix)
    assert created["key"] not in created["hint"]
    listed = api.get("/keys").json()
    assert created["id"] in [k["id"] for k in listed["keys"]]
    assert created["key"] not in api.get("/keys").text


def test_new_management_key_works_and_revoked_key_stops_at_once(api: Api) -> None:
    created = api.post("/keys", {"kind": "management"}).json()
    assert api.get("/flags", key=created["key"]).status_code == 200
    revoked = api.delete(f"/keys/{created['id']}")
    assert revoked.status_code == 200
    assert revoked.json()["revokedAt"] is not None
    response = api.get("/flags", key=created["key"])
    assert response.status_code == 401
    assert created["id"] not in [k["id"] for k in api.get("/keys").json()["keys"]]
    assert created["id"] in [k["id"] for k in api.get("/keys?revoked=true").json()["keys"]]
    assert api.delete(f"/keys/{created['id']}").status_code == 409


def test_revoking_an_unknown_key_is_404(api: Api) -> None:
    assert api.delete("/keys/key_nope").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "public"}, "environment"),
        ({"kind": "public", "environment": "nope"}, "environment"),
        ({"kind": "management", "environment": "production"}, "environment"),
        ({"kind": "server", "environment": "nope"}, "environment"),
        ({"kind": "server", "origins": ["https://a.example"]}, "origins"),
        (
            {"kind": "public", "environment": "production", "origins": ["not an origin"]},
            "origins[0]",
        ),
        ({"kind": "admin"}, "kind"),
        ({"kind": "server", "colour": "red"}, "colour"),
    ],
)
def test_invalid_key_requests_name_the_field(
    refusing_api: Api, body: dict[str, object], field: str
) -> None:
    before = refusing_api.get("/keys").json()
    response = refusing_api.post("/keys", body)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]]
    assert refusing_api.get("/keys").json() == before


def management_key(api: Api, role: str, name: str) -> dict[str, Any]:
    made = api.post("/keys", {"kind": "management", "role": role, "name": name})
    assert made.status_code == 201, made.text
    return made.json()  # type: ignore[no-any-return]


def test_an_admin_demotes_a_key_and_it_is_refused_what_its_new_role_may_not(api: Api) -> None:
    me = next(k for k in api.get("/keys").json()["keys"] if k["kind"] == "management")
    ci = management_key(api, "editor", "ci")
    assert api.post("/flags", {"key": "by-ci"}, key=ci["key"]).status_code == 201
    demoted = api.patch(f"/keys/{ci['id']}", {"role": "viewer"})
    assert demoted.status_code == 200, demoted.text
    assert demoted.json()["role"] == "viewer"
    assert demoted.json()["name"] == "ci"  # what the body leaves out stays
    assert "key" not in demoted.json()  # the secret is never shown again
    listed = {k["id"]: k for k in api.get("/keys").json()["keys"]}
    assert listed[ci["id"]]["role"] == "viewer"
    refused = api.patch("/flags/by-ci", {"name": "Renamed"}, key=ci["key"])
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["details"] == [{"field": "permission", "message": "edit"}]
    assert api.get("/flags/by-ci", key=ci["key"]).status_code == 200  # reading still is
    assert api.get("/flags/by-ci").json()["name"] == "by-ci"
    # the audit names who did it, with the key as it was and as it is
    [entry] = api.get("/audit", params={"action": "key.update"}).json()["entries"]
    assert entry["resourceType"] == "key"
    assert entry["resourceKey"] == ci["id"]
    assert entry["actor"] == f"key '{me['name']}'", entry
    assert entry["actorKeyId"] == me["id"]
    assert entry["before"]["role"] == "editor"
    assert entry["after"]["role"] == "viewer"


def test_granting_may_turn_off_lets_an_editor_key_turn_a_flag_off_where_protected(
    api: Api,
) -> None:
    oncall = management_key(api, "editor", "oncall")
    assert api.post("/flags", {"key": "checkout"}).status_code == 201
    toggle = "/flags/checkout/environments/production/toggle"
    assert api.post(toggle, {"enabled": True}).status_code == 200
    assert api.patch("/environments/production", {"requiredApprovals": 1}).status_code == 200
    lacking = api.post(toggle, {"enabled": False}, key=oncall["key"])
    assert lacking.status_code == 403, lacking.text
    assert lacking.json()["error"]["details"] == [{"field": "permission", "message": "turn-off"}]

    granted = api.patch(f"/keys/{oncall['id']}", {"mayTurnOff": True, "name": "on-call bot"})
    assert granted.status_code == 200, granted.text
    assert granted.json()["mayTurnOff"] is True
    assert granted.json()["role"] == "editor"
    assert granted.json()["name"] == "on-call bot"
    off = api.post(toggle, {"enabled": False}, key=oncall["key"])
    assert off.status_code == 200, off.text
    assert api.get("/flags/checkout/environments/production").json()["enabled"] is False
    # taken back: refused again
    assert api.patch(f"/keys/{oncall['id']}", {"mayTurnOff": False}).status_code == 200
    assert api.post(toggle, {"enabled": False}, key=oncall["key"]).status_code == 403


def test_only_an_admin_changes_a_key(api: Api) -> None:
    target = management_key(api, "editor", "target")
    for role in ("viewer", "editor"):
        caller = management_key(api, role, f"a {role}")
        refused = api.patch(f"/keys/{target['id']}", {"role": "admin"}, key=caller["key"])
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["details"] == [{"field": "permission", "message": "admin"}]
    assert api.get("/audit", params={"action": "key.update"}).json()["entries"] == []
    listed = {k["id"]: k for k in api.get("/keys").json()["keys"]}
    assert listed[target["id"]]["role"] == "editor"


def test_changing_an_unknown_or_revoked_key(api: Api) -> None:
    assert api.patch("/keys/key_nope", {"role": "viewer"}).status_code == 404
    gone = management_key(api, "editor", "gone")
    assert api.delete(f"/keys/{gone['id']}").status_code == 200
    assert api.patch(f"/keys/{gone['id']}", {"role": "viewer"}).status_code == 409


def test_a_key_does_not_demote_itself(api: Api) -> None:
    me = next(k for k in api.get("/keys").json()["keys"] if k["kind"] == "management")
    refused = api.patch(f"/keys/{me['id']}", {"role": "editor"})
    assert refused.status_code == 409, refused.text
    assert api.patch(f"/keys/{me['id']}", {"name": "first admin"}).status_code == 200


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("server", {"role": "viewer"}, "role"),
        ("server", {"mayTurnOff": True}, "mayTurnOff"),
        ("management", {"role": "owner"}, "role"),
        ("management", {"mayTurnOff": "yes"}, "mayTurnOff"),
        ("management", {"name": "x" * 201}, "name"),
        ("management", {"colour": "red"}, "colour"),
        ("management", {"kind": "server"}, "kind"),
    ],
)
def test_invalid_key_changes_name_the_field(
    refusing_api: Api, kind: str, body: dict[str, object], field: str
) -> None:
    key = next(k for k in refusing_api.get("/keys").json()["keys"] if k["kind"] == kind)
    response = refusing_api.patch(f"/keys/{key['id']}", body)
    assert response.status_code == 422, response.text
    assert field in [d["field"] for d in response.json()["error"]["details"]]
    after = next(k for k in refusing_api.get("/keys").json()["keys"] if k["id"] == key["id"])
    assert after == key


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_a_key_of_another_kind_is_refused_what_only_a_management_key_carries_each_named(
    refusing_api: Api, method: str
) -> None:
    """Made or edited alike: a role and "may turn off" are a management key's, each refusal
    naming its own field with its own reason."""
    body = {"role": "viewer", "mayTurnOff": True}
    if method == "POST":
        response = refusing_api.post("/keys", {"kind": "relay", "name": "edge", **body})
    else:
        server = next(k for k in refusing_api.get("/keys").json()["keys"] if k["kind"] == "server")
        response = refusing_api.patch(f"/keys/{server['id']}", body)
    assert response.status_code == 422, response.text
    details = {d["field"]: d["message"] for d in response.json()["error"]["details"]}
    assert details["role"] == "only a management key (a service account) has a role"
    assert details["mayTurnOff"] == (
        "only a management key (a service account) is granted 'may turn off'"
    )
