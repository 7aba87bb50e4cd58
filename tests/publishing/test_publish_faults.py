"""Publishing after the commit, off the request path: a write that committed is answered with
its success whatever happens to publishing, and the reconciler delivers it afterwards."""

from __future__ import annotations

import pytest

from control_plane.publishing.change import Change
from control_plane.publishing.hub import Hub
from shared.wire import protocol as p
from tests.conftest import Api
from tests.publishing.test_publish_the_change import Relay, comparable, from_scratch
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
        # the first word about production continues from the relay's version, never behind it:
        # a patch from it, or (when the reconciler, on a loaded machine, caught up first) the
        # whole environment at a version no older than the relay's
        if isinstance(message, p.SnapshotMessage):
            assert message.snapshot.version >= newer, message
        else:
            assert isinstance(message, p.Patch), message
            assert (message.from_version, message.version) == (newer, newer + 1)


def test_a_late_notice_never_names_another_changes_version(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notices can come late: another replica's arrive over Redis in order, behind this
    replica's own changes, which may already have compiled the environment whole. By then the
    environment may be one version ahead because of a change whose notice is still to come; the
    late notice must not take that version for itself (it did: the relay was told it held that
    version without the change in it, and nothing ever corrected it)."""
    hub = api.client.app.state.hub
    portal = api.client.blocking_portal
    for key in ("early", "later"):
        assert api.post("/flags", {"key": key}).status_code == 201
    held: list[Change] = []

    async def hold(change: Change) -> None:  # a notice still on its way
        held.append(change)

    async def quiet() -> None:  # no reconciler run to paper over what the notices do
        return None

    monkeypatch.setattr(hub, "reconcile", quiet)
    with connect(api) as ws:
        relay = Relay(api, ws)
        monkeypatch.setattr(hub, "apply", hold)
        api.post("/flags/early/environments/production/toggle", {"enabled": True})
        [environment_id] = held[0].environments
        portal.call(hub.refresh_one, environment_id)  # compiled whole: "early" is in
        api.post("/flags/later/environments/production/toggle", {"enabled": True})
        monkeypatch.setattr(hub, "apply", Hub.apply.__get__(hub))
        for change in held:  # the first notice, late; then the second
            portal.call(hub.apply, change)
        expected = from_scratch(api)
        relay.catch_up(expected)
        assert comparable(relay.held["production"]) == comparable(expected["production"])
