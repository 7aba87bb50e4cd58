"""Publishing after the commit, off the request path: a write that committed is answered with
its success whatever happens to publishing, and the reconciler delivers it afterwards."""

from __future__ import annotations

import pytest

from control_plane.publishing.publisher import Change
from shared.wire import protocol as p
from tests.conftest import Api
from tests.publishing.test_stream import connect, hello, receive, snapshots


def test_a_committed_write_answers_success_when_publishing_fails(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = api.client.app.state.hub
    with connect(api) as ws:
        hello(ws)
        before = snapshots(ws, 2)["production"].snapshot

        async def broken(change: Change) -> None:
            raise RuntimeError("the snapshot compiler crashed")

        monkeypatch.setattr(hub, "apply", broken)
        created = api.post("/flags", {"key": "after-commit"})
        assert created.status_code == 201, created.text  # was 500, and a retry then got 409
        assert api.get("/flags/after-commit").status_code == 200
        monkeypatch.undo()  # publishing works again: the reconciler catches up

        while True:
            message = receive(ws)
            if isinstance(message, p.Patch) and message.environment == "production":
                break
        assert message.from_version == before.version
        assert "after-commit" in p.apply_patch(before, message).flags


def test_a_lagging_replica_never_sends_a_relay_an_older_snapshot(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = api.client.app.state.hub
    with connect(api) as ws:
        hello(ws)
        served = snapshots(ws, 2)["production"].snapshot.version

    async def missed(change: Change) -> None:  # a Redis notice that never came
        return None

    monkeypatch.setattr(hub, "apply", missed)
    toggled = api.post("/flags", {"key": "made-elsewhere"})
    assert toggled.status_code == 201
    monkeypatch.undo()
    newer = served + 1  # what another replica already gave this relay

    with connect(api) as ws:
        hello(ws, {"production": newer})
        api.post("/flags/made-elsewhere/environments/production/toggle", {"enabled": True})
        while True:
            message = receive(ws)
            environment = (
                message.snapshot.environment
                if isinstance(message, p.SnapshotMessage)
                else getattr(message, "environment", None)
            )
            if environment == "production":
                break
        # the first word about production continues from the relay's version, never behind it
        assert isinstance(message, p.Patch), message
        assert (message.from_version, message.version) == (newer, newer + 1)
