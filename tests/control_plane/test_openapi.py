"""The OpenAPI document is generated from the real handlers."""

from __future__ import annotations

from tests.conftest import Api


def test_openapi_lists_the_api_with_camel_case_bodies(api: Api) -> None:
    response = api.client.get("/schema/openapi.json")
    assert response.status_code == 200
    document = response.json()
    paths = document["paths"]
    for path in (
        "/api/v1/flags",
        "/api/v1/flags/{key}",
        "/api/v1/flags/{key}/environments/{env}/toggle",
        "/api/v1/flags/{key}/environments/{env}/rules",
        "/api/v1/segments",
        "/api/v1/environments",
        "/api/v1/keys",
        "/api/v1/code-refs",
    ):
        assert path in paths, path
    create = paths["/api/v1/flags"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create == {"$ref": "#/components/schemas/FlagCreate"}
    properties = document["components"]["schemas"]["FlagCreate"]["properties"]
    assert "bucketBy" in properties
    assert "clientSide" in properties
