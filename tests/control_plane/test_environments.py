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
def test_invalid_or_duplicate_environment(api: Api, body: dict[str, str], status: int) -> None:
    response = api.post("/environments", body)
    assert response.status_code == status, response.text
    assert api.get("/environments").json()["count"] == 2
