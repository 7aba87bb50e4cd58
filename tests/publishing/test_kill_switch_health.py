"""A toggle always reaches every connected relay, or some health signal says why not.

Found from outside: one number flag of 1e20 made every publication of its environment fail with
``OverflowError`` (msgpack carries 64-bit integers), so no toggle reached a relay while writes
answered 200 and ``/readyz`` said all was well; and a deleted environment lived on at connected
relays with its revoked keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from litestar.testing import TestClient
from sqlalchemy import text

from control_plane.app import create_app
from control_plane.db.engine import make_sync_engine
from control_plane.settings import Settings
from shared.wire import protocol as p
from tests.conftest import Api
from tests.control_plane.test_flags import create
from tests.e2e.test_relays import eventually
from tests.publishing.test_stream import connect, hello, receive, snapshots

BIG = 100_000_000_000_000_000_000  # 1e20: past msgpack's 64 bits


def poison(api: Api, flag: str, variations: list[dict[str, Any]]) -> None:
    """Write ``variations`` to ``flag`` behind the API's back (as data stored before the API
    bounded values would be), and bump the environments' versions so a full compile reads it."""
    engine = make_sync_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE flags SET variations = :v WHERE key = :k"),
                {"v": json.dumps(variations), "k": flag},
            )
            connection.execute(
                text("UPDATE environments SET snapshot_version = snapshot_version + 1")
            )
    finally:
        engine.dispose()


def patch_for(ws: Any, environment: str) -> p.Patch:
    while True:
        message = receive(ws)
        if isinstance(message, p.Patch) and message.environment == environment:
            return message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "number", "variations": [{"value": BIG}, {"value": 1}]}, "variations[0].value"),
        (
            {"type": "number", "variations": [{"value": 1}, {"value": -(2**53)}]},
            "variations[1].value",
        ),
        ({"type": "number", "variations": [{"value": 1e300}, {"value": 1}]}, "variations[0].value"),
        (
            {"type": "json", "variations": [{"value": {"a": [BIG]}}, {"value": 1}]},
            "variations[0].value",
        ),
        (
            {
                "type": "string",
                "variations": [{"value": "a", "idx": BIG}, {"value": "b", "idx": 1}],
            },
            "variations[0].idx",
        ),
    ],
)
def test_values_the_wire_cannot_carry_are_refused_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    response = api.post("/flags", {"key": "big", **body})
    assert response.status_code == 422, response.text
    details = response.json()["error"]["details"]
    assert field in {d["field"] for d in details}, details
    assert any("2^53" in d["message"] or "from 0 to" in d["message"] for d in details), details
    assert api.get("/flags/big").status_code == 404  # nothing half-written


def test_values_within_the_bound_are_accepted(api: Api) -> None:
    edge = 2**53 - 1
    json_flag = {
        "type": "json",
        "variations": [{"value": {"on": True, "n": [edge]}}, {"value": -edge}],
    }
    assert api.post("/flags", {"key": "j", **json_flag}).status_code == 201
    number_flag = {"type": "number", "variations": [{"value": 0.5}, {"value": edge}]}
    assert api.post("/flags", {"key": "n", **number_flag}).status_code == 201
    assert (
        api.post(
            "/flags", {"key": "b", "variations": [{"value": False}, {"value": True}]}
        ).status_code
        == 201
    )


def test_rule_values_beyond_the_bound_are_refused(api: Api) -> None:
    create(api, {"key": "n", "type": "number", "variations": [{"value": 1}, {"value": 2}]})
    rules = {
        "rules": [
            {
                "clauses": [{"attribute": "age", "op": "greaterThan", "values": [BIG]}],
                "variation": 0,
            }
        ]
    }
    response = api.put("/flags/n/environments/production/rules", rules)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["details"][0]["field"] == "rules[0].clauses[0].values[0]"
    segment = {
        "key": "s",
        "rules": [{"clauses": [{"attribute": "n", "op": "in", "values": [BIG]}]}],
    }
    response = api.post("/segments", segment)
    assert response.status_code == 422, response.text


def test_a_value_that_cannot_be_encoded_never_stops_its_environment(api: Api) -> None:
    create(api, {"key": "kill"})
    create(api, {"key": "big", "type": "number", "variations": [{"value": 5}, {"value": 1}]})
    api.post("/flags/kill/environments/production/toggle", {"enabled": True})
    with connect(api) as ws:
        hello(ws)
        production = snapshots(ws, 2)["production"].snapshot
        assert production.flags["kill"].enabled is True
        poison(
            api,
            "big",
            [{"idx": 0, "value": BIG, "name": "big"}, {"idx": 1, "value": 1, "name": "1"}],
        )
        # the reconciler compiles the environment whole and meets the poisoned flag
        hub = api.client.app.state.hub
        api.client.blocking_portal.call(hub.reconcile)

        toggled = api.post("/flags/kill/environments/production/toggle", {"enabled": False})
        assert toggled.status_code == 200, toggled.text
        patch = patch_for(ws, "production")
        while "kill" not in patch.flags:
            patch = patch_for(ws, "production")
        assert patch.flags["kill"].enabled is False  # the kill switch arrives
        # the poisoned flag is left out: relays keep the last version they were sent
        assert "big" not in patch.flags
        assert "big" not in patch.removed_flags

    ready = api.client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "degraded"
    assert body["publishing"]["status"] == "degraded"
    assert "flags.big" in body["publishing"]["leftOut"]["production"]
    metrics = api.client.get("/metrics").text
    assert 'vane_publish_left_out_items{environment="production"} 1.0' in metrics

    # fixed through the API: it ships again and the report clears
    fixed = api.patch(
        "/flags/big", {"variations": [{"idx": 0, "value": 7}, {"idx": 1, "value": 1}]}
    )
    assert fixed.status_code == 200, fixed.text
    eventually(lambda: api.client.get("/readyz").json()["publishing"]["leftOut"] == {})


def test_a_failing_environment_is_reported_and_the_others_still_publish(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(api, {"key": "kill"})
    hub = api.client.app.state.hub
    with connect(api) as ws:
        hello(ws)
        full = snapshots(ws, 2)
        production_id = next(
            e for e, history in hub.histories.items() if history.key == "production"
        )
        real = hub.apply_one

        async def broken(project_id: str, environment_id: str, what: Any) -> None:
            if environment_id == production_id:
                raise RuntimeError("the database dropped the connection")
            await real(project_id, environment_id, what)

        monkeypatch.setattr(hub, "apply_one", broken)
        api.post("/flags/kill/environments/production/toggle", {"enabled": True})
        api.post("/flags/kill/environments/staging/toggle", {"enabled": True})
        staging = patch_for(ws, "staging")
        assert staging.flags["kill"].enabled is True
        assert staging.from_version == full["staging"].snapshot.version

        ready = api.client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json()["publishing"]["status"] == "failing"
        assert "RuntimeError" in ready.json()["publishing"]["failing"]["production"]
        assert "vane_publish_failing_environments 1.0" in api.client.get("/metrics").text

        monkeypatch.undo()
        api.client.blocking_portal.call(hub.reconcile)  # what the reconciler does every few seconds
        assert patch_for(ws, "production").flags["kill"].enabled is True
        eventually(lambda: api.client.get("/readyz").status_code == 200)


def test_a_deleted_environment_leaves_connected_relays_at_once(api: Api) -> None:
    created = api.post("/environments", {"key": "qa", "copyFrom": "staging"})
    assert created.status_code == 201, created.text
    key = api.post("/keys", {"kind": "public", "environment": "qa"}).json()
    with connect(api) as ws:
        welcome = hello(ws)
        assert "qa" in welcome.environments
        held = snapshots(ws, 3)
        assert key["id"] in {k.id for k in held["qa"].access.keys}
        deleted = api.delete("/environments/qa?revokeKeys=true")
        assert deleted.status_code == 200, deleted.text
        message = receive(ws)
        assert isinstance(message, p.Welcome), message
        assert message.environments == ("production", "staging")


@pytest.fixture
def quick_api(database_url: str) -> Iterator[Api]:
    """The control plane with a heartbeat every 0.2 s."""
    app = create_app(Settings(database_url=database_url, heartbeat_s=0.2))
    with TestClient(app, raise_server_exceptions=False) as client:
        keys = {key.kind.value: key.token for key in app.state.issued_keys}
        yield Api(client=client, keys=keys, database_url=database_url)


def test_the_heartbeat_names_committed_versions_and_environments(quick_api: Api) -> None:
    """A relay learns from each heartbeat what upstream has committed, whatever it was sent;
    an environment the heartbeat no longer names is one the relay must drop."""
    api = quick_api
    create(api, {"key": "kill"})
    with connect(api) as ws:
        hello(ws)
        full = snapshots(ws, 2)
        poison(
            api,
            "kill",
            [{"idx": 0, "value": True, "name": "on"}, {"idx": 1, "value": False, "name": "off"}],
        )
        before = {env: full[env].snapshot.version for env in ("production", "staging")}
        ping = None
        while ping is None:  # a heartbeat may have read the versions just before the bump
            message = p.decode_to_relay(ws.receive_bytes(timeout=30))
            if isinstance(message, p.Ping) and message.environments != before:
                ping = message
        # ``poison`` bumped every version behind the hub's back: the heartbeat tells
        assert ping.environments == {
            "production": full["production"].snapshot.version + 1,
            "staging": full["staging"].snapshot.version + 1,
        }
