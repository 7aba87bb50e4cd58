"""Nothing is half-written: a rejected request leaves every table as it was."""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, create_engine, select

from control_plane.db.engine import sync_url
from tests.conftest import Api
from tests.control_plane.test_flags import MULTI, create

OUTBOX = "outbox_events"


def dump(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(sync_url(database_url))
    try:
        metadata = MetaData()
        metadata.reflect(engine)
        with engine.connect() as connection:
            return {
                name: sorted(map(tuple, connection.execute(select(table))), key=repr)
                for name, table in metadata.tables.items()
            }
    finally:
        engine.dispose()


def test_rejected_requests_change_nothing(api: Api) -> None:
    create(api, MULTI)
    api.post("/segments", {"key": "beta", "included": ["u1"]})
    api.put(
        "/flags/checkout-flow/environments/staging/rules",
        {"rules": [{"clauses": [{"segment": "beta"}], "variation": 1}]},
    )
    before = dump(api.database_url)
    rejected = [
        ("POST", "/flags", {"key": "checkout-flow"}),
        ("POST", "/flags", {"key": "BAD"}),
        ("PATCH", "/flags/checkout-flow", {"name": ""}),
        ("PUT", "/flags/checkout-flow/environments/staging", {"enabled": True, "offVariation": 99}),
        (
            "PUT",
            "/flags/checkout-flow/environments/staging",
            {"enabled": True, "fallthrough": {"rollout": [{"idx": 0, "weight": 60}]}},
        ),
        (
            "PUT",
            "/flags/checkout-flow/environments/staging/rules",
            {
                "rules": [
                    {"clauses": [{"attribute": "a", "values": ["x"]}], "variation": 0},
                    {
                        "clauses": [{"attribute": "a", "op": "matches", "values": ["["]}],
                        "variation": 0,
                    },
                ]
            },
        ),
        ("POST", "/flags/checkout-flow/environments/nowhere/toggle", {"enabled": True}),
        ("DELETE", "/segments/beta", None),
        (
            "PATCH",
            "/segments/beta",
            {"included": ["ok"], "rules": [{"clauses": [{"segment": "beta"}]}]},
        ),
        ("POST", "/environments", {"key": "staging"}),
        ("POST", "/keys", {"kind": "public"}),
        (
            "PUT",
            "/code-refs",
            {"repository": "r", "refs": [{"flagKey": "f", "path": "", "line": 1}]},
        ),
    ]
    for method, path, body in rejected:
        response = api.request(method, path, json=body)
        assert 400 <= response.status_code < 500, (method, path, response.status_code)
        assert "error" in response.json()
    after = dump(api.database_url)
    # the webhook dispatcher fans earlier changes' outbox events out (dropping those no webhook
    # wants) in the background at any time; a rejected request must only add none of its own
    assert {e[0] for e in after.pop(OUTBOX)} <= {e[0] for e in before.pop(OUTBOX)}
    assert after == before
