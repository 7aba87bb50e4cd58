"""Authentication and key kinds, as a caller meets them over HTTP."""

from __future__ import annotations

import pytest

from tests.conftest import Api

FLAG_ENDPOINTS = [
    ("GET", "/flags"),
    ("POST", "/flags"),
    ("GET", "/flags/f"),
    ("PATCH", "/flags/f"),
    ("POST", "/flags/f/archive"),
    ("POST", "/flags/f/restore"),
    ("GET", "/flags/f/audit"),
    ("GET", "/flags/f/code-refs"),
    ("GET", "/flags/f/environments/production"),
    ("PUT", "/flags/f/environments/production"),
    ("POST", "/flags/f/environments/production/toggle"),
    ("GET", "/flags/f/environments/production/rules"),
    ("PUT", "/flags/f/environments/production/rules"),
    ("GET", "/segments"),
    ("POST", "/segments"),
    ("GET", "/environments"),
    ("POST", "/environments"),
    ("GET", "/keys"),
    ("POST", "/keys"),
    ("PUT", "/code-refs"),
]


def test_missing_key_is_401_with_json_error(api: Api) -> None:
    response = api.get("/flags", key=None)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    assert "Authorization: Bearer" in error["message"]


@pytest.mark.parametrize(
    "header",
    ["Bearer vsk_live_notarealkey", "Bearer nonsense", "Basic dXNlcjpwYXNz", "Bearer "],
)
def test_unknown_or_malformed_key_is_401(api: Api, header: str) -> None:
    response = api.client.get("/api/v1/flags", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("kind", ["server", "relay", "public"])
def test_non_management_keys_get_403_on_management_endpoints(api: Api, kind: str) -> None:
    api.post("/flags", {"key": "f"})
    before = api.get("/flags").json()
    for method, path in FLAG_ENDPOINTS:
        response = api.request(method, path, key=api.keys[kind], json={"key": "x", "enabled": True})
        assert response.status_code == 403, (method, path, response.text)
        error = response.json()["error"]
        assert error["code"] == "forbidden"
        assert "management key (vsk_)" in error["message"]
    assert api.get("/flags").json() == before


def test_v1_prefix_is_the_same_api(api: Api) -> None:
    created = api.post("/flags", {"key": "same"})
    assert created.status_code == 201
    via_v1 = api.client.get("/v1/flags/same", headers=api.headers(api.key))
    assert via_v1.status_code == 200
    assert via_v1.json()["id"] == created.json()["id"]


def test_health_endpoints_need_no_key(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["database"] == "ok"


def test_unknown_endpoint_is_json_404(api: Api) -> None:
    response = api.get("/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
