"""``GET /api/v1/snapshot/stream`` on the control plane: the same snapshot feed a relay serves
(``relay.routes.feed``), for a provider pointed at the control plane directly.

Only a server key bound to an environment reads it (its environment's compiled snapshot: the
rules, never key data), and never from a page. The stream is one of the hub's connections, so a
change reaches it exactly as it reaches relays: marked after commit, sent as a patch from what
this stream last sent (or a full snapshot when it cannot be).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, get
from litestar.response import ServerSentEvent, ServerSentEventMessage

from control_plane.auth import KeyKind, Principal, request_session, requires
from control_plane.errors import ApiError
from control_plane.publishing.hub import Connection, History, Hub
from shared.wire import protocol as p

KEEPALIVE_S = 15.0
_EMPTY_ACCESS = p.Access()
_json = msgspec.json.Encoder()


def _snapshot(history: History) -> ServerSentEventMessage:
    message = p.SnapshotMessage(snapshot=history.snapshot, access=_EMPTY_ACCESS)
    return ServerSentEventMessage(
        data=_json.encode(message).decode(), event="snapshot", id=str(history.version)
    )


def _patches(old: History, new: History) -> list[ServerSentEventMessage]:
    """The history's patches from what was sent (key hashes left out), or one diff if not
    held."""
    chain = new.patches_since(old.version)
    patches = (
        [msgspec.structs.replace(patch, access=None) for patch, _frame in chain]
        if chain is not None
        else [p.diff(old.snapshot, new.snapshot)]
    )
    return [
        ServerSentEventMessage(
            data=_json.encode(patch).decode(), event="patch", id=str(patch.version)
        )
        for patch in patches
    ]


async def _events(hub: Hub, history: History, resume: int | None) -> AsyncIterator[Any]:
    connection = Connection(
        relay_id=f"provider-{secrets.token_hex(3)}",
        project_id=history.project_id,
        environment_ids=frozenset({history.environment_id}),
        bound=True,
    )
    hub.attach(connection)
    try:
        if resume == history.version:
            yield ServerSentEventMessage(data="{}", event="current", id=str(history.version))
        else:
            yield _snapshot(history)
        sent = history
        async for marked in connection.changes(KEEPALIVE_S):
            if marked is None:
                yield ServerSentEventMessage(comment="keep-alive")
                continue
            latest = await hub.history(sent.environment_id)
            if latest is None:
                return  # the environment is gone
            if latest.version > sent.version:
                for message in _patches(sent, latest):
                    yield message
                sent = latest
    finally:
        hub.detach(connection)


@get(
    "/snapshot/stream",
    guards=[requires(KeyKind.SERVER)],
    summary="The compiled snapshot of the key's environment and its changes (server-sent events)",
    description=(
        "For in-process providers (a server key bound to an environment; never from a page). "
        "Events: `snapshot` (full), `patch` (from the previous version), `current` (resuming at "
        "the version held, via Last-Event-ID)."
    ),
    tags=["flags"],
)
async def snapshot_stream(request: Request[Principal, Any, Any]) -> ServerSentEvent:
    principal = request.user
    if principal.environment_id is None:
        raise ApiError(
            403,
            "this server key is not bound to an environment; issue one with "
            "'vane keys create --kind server --env <environment>' to read its snapshot",
        )
    session = request_session(request.scope)
    if session is not None:
        await session.close()  # the stream may live for hours: give the connection back now
    hub: Hub = request.app.state.hub
    history = await hub.history(principal.environment_id)
    if history is None:
        raise ApiError(404, "the key's environment no longer exists")
    resume = request.headers.get("last-event-id")
    version = int(resume) if resume is not None and resume.isdigit() else None
    return ServerSentEvent(_events(hub, history, version))
