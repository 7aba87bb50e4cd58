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


def test_required_approvals_is_documented_from_0_to_5(api: Api) -> None:
    schemas = api.client.get("/schema/openapi.json").json()["components"]["schemas"]
    for name in ("EnvironmentCreate", "EnvironmentPatch"):
        field = schemas[name]["properties"]["requiredApprovals"]
        assert (field["minimum"], field["maximum"]) == (0, 5), (name, field)
    # the schema is what is checked: outside it, 422 naming the field, nothing written
    for bad in (6, -1):
        for method, path, body in (
            ("POST", "/environments", {"key": "eu", "requiredApprovals": bad}),
            ("PATCH", "/environments/production", {"requiredApprovals": bad}),
        ):
            refused = api.request(method, path, json=body)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["details"][0]["field"] == "requiredApprovals"
    assert api.get("/environments/eu").status_code == 404
    assert api.get("/environments/production").json()["requiredApprovals"] == 0

