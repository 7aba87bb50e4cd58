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


GATED = [
    ("put", "/api/v1/flags/{key}/environments/{env}"),
    ("put", "/api/v1/flags/{key}/environments/{env}/rules"),
    ("post", "/api/v1/flags/{key}/environments/{env}/schedule"),
    ("patch", "/api/v1/flags/{key}"),
    ("post", "/api/v1/flags/{key}/archive"),
    ("post", "/api/v1/flags/{key}/restore"),
    ("patch", "/api/v1/segments/{key}"),
    ("delete", "/api/v1/segments/{key}"),
]
"""The direct writes the protection gate (``domain.protection``) can refuse with 409."""


def test_the_writes_a_protected_environment_refuses_document_approval_required(
    api: Api,
) -> None:
    paths = api.client.get("/schema/openapi.json").json()["paths"]
    conflicts = set()
    for method, path in GATED:
        conflict = paths[path][method]["responses"]["409"]["description"]
        assert "approval_required" in conflict, (method, path, conflict)
        assert "/api/v1/change-requests" in conflict, (method, path, conflict)
        conflicts.add(conflict)
    assert len(conflicts) == 1  # one definition, shared
    # a write no protection gates keeps the plain conflict
    plain = paths["/api/v1/flags"]["post"]["responses"]["409"]["description"]
    assert "approval_required" not in plain
    toggle = paths["/api/v1/flags/{key}/environments/{env}/toggle"]["post"]
    refused = toggle["responses"]["403"]["description"]
    assert "turn-off" in refused
    gated = toggle["responses"]["409"]["description"]
    assert "approval_required" in gated
    assert "/api/v1/change-requests" in gated
    assert "never gated" in toggle["description"]
