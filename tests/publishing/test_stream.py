"""The relay stream as a relay meets it: hello, welcome, snapshots, ordered patches, access."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import WebSocketTestSession

from shared.keys import hash_token
from shared.wire import protocol as p
from tests.conftest import Api
from tests.control_plane.test_flags import create


def connect(api: Api, key: str | None = None) -> Any:
    return api.client.websocket_connect(
        "/api/v1/relay/stream", headers={"Authorization": f"Bearer {key or api.keys['relay']}"}
    )


def receive(ws: WebSocketTestSession) -> p.ToRelay:
    while True:
        message = p.decode_to_relay(ws.receive_bytes(timeout=10))
        if not isinstance(message, p.Ping | p.Pong):
            return message


def hello(ws: WebSocketTestSession, versions: dict[str, int] | None = None) -> p.Welcome:
    ws.send_bytes(p.encode(p.Hello(relay="test-relay", versions=versions or {})))
    welcome = receive(ws)
    assert isinstance(welcome, p.Welcome)
    return welcome


def snapshots(ws: WebSocketTestSession, count: int) -> dict[str, p.SnapshotMessage]:
    received = {}
    for _ in range(count):
        message = receive(ws)
        assert isinstance(message, p.SnapshotMessage), message
        received[message.snapshot.environment] = message
    return received


def test_full_snapshots_then_patches_in_order(api: Api) -> None:
    create(api, {"key": "kill"})
    unbound = api.post("/keys", {"kind": "server"}).json()["key"]  # every environment's
    with connect(api) as ws:
        welcome = hello(ws)
        assert welcome.environments == ("production", "staging")
        full = snapshots(ws, 2)
        production = full["production"].snapshot
        assert production.flags["kill"].enabled is False
        public_hash = hash_token(api.keys["public"])
        assert public_hash in {k.hash for k in full["production"].access.keys}
        assert public_hash not in {
            k.hash for k in full["staging"].access.keys
        }  # bound to production
        server_hash = hash_token(api.keys["server"])  # the first server key: production's too
        assert server_hash in {k.hash for k in full["production"].access.keys}
        assert server_hash not in {k.hash for k in full["staging"].access.keys}
        assert hash_token(unbound) in {k.hash for k in full["staging"].access.keys}
        # every kind's hash, so relays tell a wrong kind (403) from an unknown key (401) and take
        # management keys on event intake; a key itself never travels
        kinds = {k.hash: k.kind for k in full["staging"].access.keys}
        assert kinds[hash_token(api.keys["management"])] == "management"
        assert kinds[hash_token(api.keys["relay"])] == "relay"
        assert all(token not in repr(full) for token in api.keys.values())

        api.post("/flags/kill/environments/production/toggle", {"enabled": True})
        patch = receive(ws)
        assert isinstance(patch, p.Patch)
        assert (patch.environment, patch.from_version) == ("production", production.version)
        assert patch.version == production.version + 1
        assert patch.flags["kill"].enabled is True
        assert set(patch.flags) == {"kill"}
        patched = p.apply_patch(production, patch)

        api.put("/flags/kill/environments/production", {"offVariation": 0})
        api.post("/flags/kill/environments/production/toggle", {"enabled": False})
        for _ in range(2):
            nxt = receive(ws)
            assert isinstance(nxt, p.Patch)
            assert nxt.from_version == patched.version
            patched = p.apply_patch(patched, nxt)
        assert patched.flags["kill"].enabled is False
        assert patched.flags["kill"].off_variation == 0


def test_hello_with_versions_gets_nothing_patches_or_full(api: Api) -> None:
    create(api, {"key": "kill"})
    with connect(api) as ws:
        hello(ws)
        first = snapshots(ws, 2)
    v0 = first["production"].snapshot.version
    staging = first["staging"].snapshot.version
    api.post("/flags/kill/environments/production/toggle", {"enabled": True})
    api.post("/flags/kill/environments/production/toggle", {"enabled": False})
    with connect(api) as ws:
        # current for staging; two versions behind for production: the hub has no patches yet
        # in this process for v0 unless it compiled it, so either patches or a full snapshot
        hello(ws, {"production": v0, "staging": staging})
        message = receive(ws)
        if isinstance(message, p.Patch):
            # a chain from v0 to v0 + 2; publishing runs after each commit in the background,
            # so the two toggles may have been compiled together into one patch
            assert message.from_version == v0
            while message.version < v0 + 2:
                following = receive(ws)
                assert isinstance(following, p.Patch)
                assert following.from_version == message.version
                message = following
            assert message.version == v0 + 2
        else:
            assert isinstance(message, p.SnapshotMessage)
            assert message.snapshot.version == v0 + 2
        api.post("/flags/kill/environments/staging/toggle", {"enabled": True})
        change = receive(ws)  # nothing was sent for staging before this change
        assert isinstance(change, p.Patch)
        assert (change.environment, change.from_version) == ("staging", staging)
    with connect(api) as ws:
        hello(ws, {"production": 10_000})  # a version the control plane never had
        message = receive(ws)
        assert isinstance(message, p.SnapshotMessage)


def test_new_flag_archive_and_segment_changes_reach_the_stream(api: Api) -> None:
    with connect(api) as ws:
        hello(ws)
        snapshots(ws, 2)
        create(api, {"key": "fresh"})
        added = {receive(ws).environment for _ in range(2)}  # type: ignore[union-attr]
        assert added == {"production", "staging"}
        api.post("/segments", {"key": "beta", "included": ["u1"]})
        api.put(
            "/flags/fresh/environments/staging/rules",
            {"rules": [{"clauses": [{"segment": "beta"}], "variation": 0}]},
        )
        rules = receive(ws)
        assert isinstance(rules, p.Patch)
        assert rules.segments["beta"].included == ("u1",)
        api.patch("/segments/beta", {"included": ["u1", "u2"]})
        segment = receive(ws)
        assert isinstance(segment, p.Patch)
        assert segment.segments["beta"].included == ("u1", "u2")
        assert segment.flags == {}
        api.post("/flags/fresh/archive")
        removed = [receive(ws) for _ in range(2)]
        assert all(isinstance(m, p.Patch) and m.removed_flags == ("fresh",) for m in removed)


def test_revoking_a_public_key_changes_access(api: Api) -> None:
    created = api.post(
        "/keys", {"kind": "public", "environment": "staging", "origins": ["https://a.example"]}
    ).json()
    with connect(api) as ws:
        hello(ws)
        full = snapshots(ws, 2)
        keys = {k.hash: k for k in full["staging"].access.keys}
        assert keys[hash_token(created["key"])].origins == ("https://a.example",)
        api.delete(f"/keys/{created['id']}")
        patch = receive(ws)
        assert isinstance(patch, p.Patch)
        assert patch.access is not None
        assert hash_token(created["key"]) not in {k.hash for k in patch.access.keys}


def test_environment_bound_relay_key_reads_only_its_environment(api: Api) -> None:
    bound = api.post("/keys", {"kind": "relay", "environment": "staging"}).json()
    with connect(api, bound["key"]) as ws:
        assert hello(ws).environments == ("staging",)
        assert set(snapshots(ws, 1)) == {"staging"}


@pytest.mark.parametrize("kind", ["management", "server", "public"])
def test_only_relay_keys_may_open_the_stream(api: Api, kind: str) -> None:
    from litestar.exceptions import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect) as refused:
        connect(api, api.keys[kind]).__enter__()
    assert "relay key (rsk_)" in refused.value.detail
