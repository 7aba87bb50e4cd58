"""A project worth exporting: a segment, flags with rules, targets, a prerequisite and a
rollout in several environments."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import Api


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def seed(api: Api) -> None:
    ok(
        api.post(
            "/segments",
            {
                "key": "beta",
                "included": ["u1"],
                "rules": [
                    {
                        "clauses": [{"attribute": "plan", "op": "in", "values": ["pro"]}],
                        "weight": 50,
                    }
                ],
            },
        ),
        201,
    )
    ok(
        api.post(
            "/flags",
            {
                "key": "checkout",
                "type": "string",
                "variations": [
                    {"value": "old", "name": "Old"},
                    {"value": "new", "name": "New"},
                    {"value": "beta"},
                ],
                "tags": ["payments"],
            },
        ),
        201,
    )
    ok(api.post("/flags", {"key": "login"}), 201)
    ok(
        api.put(
            "/flags/checkout/environments/staging",
            {
                "enabled": True,
                "fallthrough": {"rollout": [{"idx": 0, "weight": 25}, {"idx": 1, "weight": 75}]},
                "targets": [{"variation": 2, "values": ["qa-1", "qa-2"]}],
                "prerequisites": [{"key": "login", "variation": 0}],
            },
        )
    )
    ok(
        api.put(
            "/flags/checkout/environments/staging/rules",
            {
                "rules": [
                    {"id": "r-beta", "clauses": [{"segment": "beta"}], "variation": 2},
                    {
                        "description": "Germany",
                        "clauses": [{"attribute": "country", "op": "in", "values": ["DE"]}],
                        "serve": {"variation": 1},
                    },
                ]
            },
        )
    )


@pytest.fixture
def seeded(api: Api) -> Api:
    seed(api)
    return api


def export(api: Api) -> dict[str, Any]:
    return ok(api.get("/export"))  # type: ignore[no-any-return]


def plan(api: Api, document: dict[str, Any], **more: Any) -> dict[str, Any]:
    return ok(api.post("/plan", {"document": document, **more}))  # type: ignore[no-any-return]


def apply(api: Api, document: dict[str, Any], **more: Any) -> dict[str, Any]:
    body = {"document": document, "fileName": "vane.yaml", **more}
    return ok(api.post("/apply", body))  # type: ignore[no-any-return]


def flag_of(document: dict[str, Any], key: str) -> dict[str, Any]:
    return next(f for f in document["flags"] if f["key"] == key)


def edited(document: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(document)
