"""The flags API as a user meets it: create, read, change, archive, audit; every field rule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

MULTI: dict[str, Any] = {
    "key": "checkout-flow",
    "name": "Checkout flow",
    "type": "string",
    "variations": [
        {"idx": 0, "value": "classic", "name": "Classic"},
        {"idx": 1, "value": "one-page", "name": "One page"},
        {"idx": 2, "value": "express", "name": "Express"},
    ],
    "tags": ["checkout"],
}


def create(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/flags", body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def fields(response: Any) -> list[str]:
    return [d["field"] for d in response.json()["error"]["details"]]


def test_boolean_flag_defaults_and_disabled_everywhere(api: Api) -> None:
    flag = create(api, {"key": "new-nav"})
    assert flag["type"] == "boolean"
    assert flag["name"] == "new-nav"
    assert flag["temporary"] is True
    assert flag["bucketBy"] == "key"
    assert flag["archived"] is False
    assert flag["variations"] == [
        {"idx": 0, "value": True, "name": "on"},
        {"idx": 1, "value": False, "name": "off"},
    ]
    assert set(flag["environments"]) == {"production", "staging"}
    for summary in flag["environments"].values():
        assert summary["enabled"] is False
        assert summary["offVariation"] == 1
        assert summary["fallthrough"] == {"variation": 0}
    assert api.get("/flags/new-nav").json() == flag


def test_multivariate_flag_round_trips(api: Api) -> None:
    flag = create(api, MULTI)
    assert flag["variations"] == MULTI["variations"]
    assert flag["environments"]["staging"]["offVariation"] == 2
    listed = api.get("/flags").json()
    assert listed["count"] == 1
    assert listed["flags"][0]["key"] == "checkout-flow"


@pytest.mark.parametrize(
    ("flag_type", "values"),
    [("number", [1, 2.5, -3]), ("json", [{"a": 1}, [1, 2], "x", None])],
)
def test_number_and_json_flags(api: Api, flag_type: str, values: list[Any]) -> None:
    body = {
        "key": f"f-{flag_type}",
        "type": flag_type,
        "variations": [{"value": v} for v in values],
    }
    flag = create(api, body)
    assert [v["value"] for v in flag["variations"]] == values
    assert [v["idx"] for v in flag["variations"]] == list(range(len(values)))


def test_boolean_flag_may_send_its_own_variations(api: Api) -> None:
    flag = create(
        api,
        {
            "key": "b",
            "variations": [{"value": False, "name": "Off"}, {"value": True, "name": "On"}],
        },
    )
    assert flag["environments"]["production"]["offVariation"] == 0
    assert flag["environments"]["production"]["fallthrough"] == {"variation": 1}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "Upper"}, "key"),
        ({"key": "has space"}, "key"),
        ({"key": "a" * 129}, "key"),
        ({"key": ""}, "key"),
        ({"name": "no key"}, "key"),
        ({"key": "s", "type": "string"}, "variations"),
        ({"key": "s", "type": "string", "variations": [{"value": "only"}]}, "variations"),
        (
            {"key": "s", "type": "string", "variations": [{"value": "a"}, {"value": 2}]},
            "variations[1].value",
        ),
        (
            {"key": "n", "type": "number", "variations": [{"value": 1}, {"value": True}]},
            "variations[1].value",
        ),
        (
            {"key": "n", "type": "number", "variations": [{"value": 1}, {"value": "2"}]},
            "variations[1].value",
        ),
        ({"key": "b", "variations": [{"value": True}, {"value": True}]}, "variations"),
        ({"key": "b", "variations": [{"value": 1}, {"value": 0}]}, "variations[0].value"),
        (
            {"key": "b", "variations": [{"value": True}, {"value": False}, {"value": True}]},
            "variations",
        ),
        (
            {
                "key": "s",
                "type": "string",
                "variations": [{"idx": 0, "value": "a"}, {"idx": 0, "value": "b"}],
            },
            "variations[1].idx",
        ),
        (
            {
                "key": "s",
                "type": "string",
                "variations": [{"idx": 0, "value": "a"}, {"value": "b"}],
            },
            "variations",
        ),
        ({"key": "x", "type": "colour"}, "type"),
        ({"key": "x", "name": 5}, "name"),
        ({"key": "x", "temporary": "yes"}, "temporary"),
        ({"key": "x", "tags": "one"}, "tags"),
        ({"key": "x", "unknownField": 1}, "unknownField"),
        (
            {"key": "x", "variations": [{"value": True, "colour": 1}, {"value": False}]},
            "variations[0].colour",
        ),
    ],
)
def test_invalid_flag_is_422_naming_the_field(
    refusing_api: Api, body: dict[str, Any], field: str
) -> None:
    response = refusing_api.post("/flags", body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in fields(response), error
    assert refusing_api.get("/flags").json()["count"] == 0


def test_malformed_json_is_400(api: Api) -> None:
    response = api.post(
        "/flags", content=b'{"key": "x",', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_body_over_one_mebibyte_is_413(api: Api) -> None:
    big = b'{"key": "x", "description": "' + b"a" * (1024 * 1024) + b'"}'
    response = api.post("/flags", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert api.get("/flags").json()["count"] == 0


def test_duplicate_key_is_409(api: Api) -> None:
    create(api, {"key": "dup"})
    response = api.post("/flags", {"key": "dup"})
    assert response.status_code == 409
    assert "dup" in response.json()["error"]["message"]


def test_unknown_flag_and_environment_are_404(api: Api) -> None:
    assert api.get("/flags/nope").status_code == 404
    create(api, {"key": "f"})
    response = api.get("/flags/f/environments/qa")
    assert response.status_code == 404
    assert "qa" in response.json()["error"]["message"]


def test_patch_changes_only_metadata(api: Api) -> None:
    create(api, MULTI)
    response = api.patch(
        "/flags/checkout-flow", {"name": "Checkout", "tags": ["a", "b"], "temporary": False}
    )
    assert response.status_code == 200
    flag = response.json()
    assert (flag["name"], flag["tags"], flag["temporary"]) == ("Checkout", ["a", "b"], False)
    assert flag["description"] == ""
    assert flag["version"] == 2
    refused = api.patch("/flags/checkout-flow", {"enabled": True})
    assert refused.status_code == 422
    assert fields(refused) == ["enabled"]
    assert api.patch("/flags/checkout-flow", {"name": " "}).status_code == 422


def test_environment_settings_fixed_and_rollout(api: Api) -> None:
    create(api, MULTI)
    response = api.put(
        "/flags/checkout-flow/environments/staging",
        {
            "enabled": True,
            "offVariation": 0,
            "fallthrough": {
                "rollout": [{"idx": 1, "weight": 33.333}, {"idx": 2, "weight": 66.667}]
            },
        },
    )
    assert response.status_code == 200, response.text
    settings = response.json()
    assert settings["enabled"] is True
    assert settings["offVariation"] == 0
    assert settings["fallthrough"] == {
        "rollout": [{"idx": 1, "weight": 33.333}, {"idx": 2, "weight": 66.667}]
    }
    assert api.get("/flags/checkout-flow/environments/staging").json() == settings
    production = api.get("/flags/checkout-flow/environments/production").json()
    assert production["enabled"] is False
    fixed = api.put(
        "/flags/checkout-flow/environments/staging", {"fallthrough": {"variation": 2}}
    ).json()
    assert fixed["fallthrough"] == {"variation": 2}
    assert fixed["enabled"] is True  # left out: unchanged


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"offVariation": 7}, "offVariation"),
        ({"fallthrough": {"variation": 9}}, "fallthrough.variation"),
        ({"fallthrough": {}}, "fallthrough"),
        ({"fallthrough": {"variation": 0, "rollout": [{"idx": 0, "weight": 100}]}}, "fallthrough"),
        (
            {"fallthrough": {"rollout": [{"idx": 0, "weight": 50}, {"idx": 1, "weight": 40}]}},
            "fallthrough.rollout",
        ),
        (
            {
                "fallthrough": {
                    "rollout": [{"idx": 0, "weight": 50.0001}, {"idx": 1, "weight": 49.9999}]
                }
            },
            "fallthrough.rollout[0].weight",
        ),
        (
            {"fallthrough": {"rollout": [{"idx": 0, "weight": 150}, {"idx": 1, "weight": -50}]}},
            "fallthrough.rollout[0].weight",
        ),
        ({"fallthrough": {"rollout": [{"idx": 5, "weight": 100}]}}, "fallthrough.rollout[0].idx"),
        ({"fallthrough": {"rollout": []}}, "fallthrough.rollout"),
        ({"enabled": "true"}, "enabled"),
        ({"rules": []}, "rules"),
    ],
)
def test_invalid_environment_settings(api: Api, body: dict[str, Any], field: str) -> None:
    create(api, MULTI)
    before = api.get("/flags/checkout-flow/environments/staging").json()
    response = api.put("/flags/checkout-flow/environments/staging", body)
    assert response.status_code == 422, response.text
    assert field in fields(response)
    assert api.get("/flags/checkout-flow/environments/staging").json() == before


def test_toggle_is_a_kill_switch_per_environment(api: Api) -> None:
    create(api, {"key": "kill"})
    on = api.post("/flags/kill/environments/production/toggle", {"enabled": True})
    assert on.status_code == 200
    assert on.json() == {"flag": "kill", "environment": "production", "enabled": True, "version": 2}
    flag = api.get("/flags/kill").json()
    assert flag["environments"]["production"]["enabled"] is True
    assert flag["environments"]["staging"]["enabled"] is False
    again = api.post("/flags/kill/environments/production/toggle", {"enabled": True}).json()
    assert again["version"] == 2  # no change, no new version
    off = api.post("/flags/kill/environments/production/toggle", {"enabled": False}).json()
    assert off["enabled"] is False
    bad = api.post("/flags/kill/environments/production/toggle", {"enabled": 1})
    assert bad.status_code == 422
    assert fields(bad) == ["enabled"]
    missing = api.post("/flags/kill/environments/production/toggle", {})
    assert missing.status_code == 422
    assert fields(missing) == ["enabled"]


def test_toggle_bumps_the_environment_snapshot_version(api: Api) -> None:
    create(api, {"key": "kill"})

    def versions() -> dict[str, int]:
        return {
            e["key"]: e["snapshotVersion"] for e in api.get("/environments").json()["environments"]
        }

    before = versions()
    api.post("/flags/kill/environments/production/toggle", {"enabled": True})
    after = versions()
    assert after["production"] == before["production"] + 1
    assert after["staging"] == before["staging"]


def test_archive_hides_freezes_and_restore_brings_back(api: Api) -> None:
    create(api, {"key": "old"})
    create(api, {"key": "kept"})
    archived = api.post("/flags/old/archive")
    assert archived.status_code == 200
    assert archived.json()["archived"] is True
    assert archived.json()["archivedAt"] is not None
    assert [f["key"] for f in api.get("/flags").json()["flags"]] == ["kept"]
    assert [f["key"] for f in api.get("/flags?archived=true").json()["flags"]] == ["kept", "old"]
    assert api.get("/flags/old").json()["archived"] is True
    for method, path, body in [
        ("POST", "/flags/old/environments/production/toggle", {"enabled": True}),
        ("PUT", "/flags/old/environments/production", {"enabled": True}),
        ("PUT", "/flags/old/environments/production/rules", {"rules": []}),
    ]:
        response = api.request(method, path, json=body)
        assert response.status_code == 409, (path, response.text)
        assert "archived" in response.json()["error"]["message"]
    assert api.post("/flags/old/archive").status_code == 409
    restored = api.post("/flags/old/restore")
    assert restored.status_code == 200
    assert restored.json()["archived"] is False
    assert (
        api.post("/flags/old/environments/production/toggle", {"enabled": True}).status_code == 200
    )
    assert api.post("/flags/old/restore").status_code == 409


def test_audit_lists_every_change_newest_first(api: Api) -> None:
    create(api, {"key": "audited"})
    api.patch("/flags/audited", {"name": "Audited"})
    api.post("/flags/audited/environments/staging/toggle", {"enabled": True})
    api.put("/flags/audited/environments/staging", {"offVariation": 0})
    api.post("/flags/audited/archive")
    api.post("/flags/audited/restore")
    response = api.get("/flags/audited/audit")
    assert response.status_code == 200
    entries = response.json()["entries"]
    assert [e["action"] for e in entries] == [
        "flag.restore",
        "flag.archive",
        "flag.settings.update",
        "flag.toggle",
        "flag.update",
        "flag.create",
    ]
    toggle = entries[3]
    assert toggle["environment"] == "staging"
    assert toggle["before"] == {"enabled": False}
    assert toggle["after"] == {"enabled": True}
    assert toggle["actorKeyId"].startswith("key_")
    update = entries[4]
    assert update["before"]["name"] == "audited"
    assert update["after"]["name"] == "Audited"
    assert entries[2]["before"]["offVariation"] == 1
    assert entries[2]["after"]["offVariation"] == 0
    page = api.get("/flags/audited/audit?limit=2").json()
    assert [e["action"] for e in page["entries"]] == ["flag.restore", "flag.archive"]
    assert page["nextCursor"] == page["entries"][-1]["id"]  # the audit's own cursor, kept
    rest = api.get(f"/flags/audited/audit?limit=10&cursor={page['nextCursor']}").json()
    assert [e["action"] for e in rest["entries"]] == [e["action"] for e in entries[2:]]
    assert rest["nextCursor"] is None
    assert api.get("/flags/nope/audit").status_code == 404
    assert api.get("/flags/audited/audit?limit=0").status_code == 422
