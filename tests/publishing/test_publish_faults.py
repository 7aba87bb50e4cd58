"""Publishing after the commit, off the request path: a write that committed is answered with
its success whatever happens to publishing, and the reconciler delivers it afterwards."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

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

        async def broken(environment_ids: Iterable[str]) -> None:
            raise RuntimeError("the snapshot compiler crashed")

        monkeypatch.setattr(hub, "refresh", broken)
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
