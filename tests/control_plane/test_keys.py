"""Issuing, listing and revoking API keys."""

from __future__ import annotations

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
