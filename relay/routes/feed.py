"""The snapshot feed for in-process providers: ``GET /api/v1/snapshot/stream`` (also ``/v1``).

A backend's provider (``shared.client.provider``) evaluates flags itself, so it needs the rules:
only a server key bound to an environment may read its environment's compiled snapshot, and never
from a page (a request with an ``Origin`` is refused). The answer is a server-sent event stream:

- ``event: snapshot`` — the full snapshot, ``id`` its version: first, and whenever the provider
  cannot be brought up to date with a patch;
- ``event: patch`` — what changed since the version the provider holds (``shared.wire.protocol``'s
  ``Patch``, without key data), ``id`` the new version;
- ``event: current`` — sent first instead of a snapshot when the provider resumes
  (``Last-Event-ID`` or ``?v=``) at the version the relay holds;
- a comment every ``keepalive_s`` so that a dead connection is noticed.

Data lines are the JSON form of the relay protocol's messages, so the provider applies them with
the same ``apply_patch`` relays use. Access data (key hashes) never leaves the relay here.
"""

from __future__ import annotations

import contextlib

import msgspec

from relay.http import Request, Response, Router, Send, vane_error_body
from relay.routes.admission import Gate
from relay.routes.callers import bearer_token, unknown_key
from relay.routes.sse import Change, ChangeHub, DisconnectWatch, Subscription, follow
from relay.store import EnvironmentState
from shared.wire import protocol as p

PATHS = ("/api/v1/snapshot/stream", "/v1/snapshot/stream")
_EMPTY_ACCESS = p.Access()
_json = msgspec.json.Encoder()


def snapshot_event(state: EnvironmentState) -> bytes:
    message = p.SnapshotMessage(snapshot=state.snapshot, access=_EMPTY_ACCESS)
    return b"event: snapshot\nid: %d\ndata: %s\n\n" % (state.version, _json.encode(message))


def patch_event(old: EnvironmentState, new: EnvironmentState) -> bytes:
    """What turns ``old`` into ``new``: the patch the relay applied when ``new`` follows ``old``
    directly (the cost of the change), else the two snapshots compared (every flag)."""
    patch = new.patch
    if patch is None or patch.from_version != old.version or patch.version != new.version:
        patch = p.diff(old.snapshot, new.snapshot)
    elif patch.access is not None:
        patch = msgspec.structs.replace(patch, access=None)  # key data never leaves the relay
    return b"event: patch\nid: %d\ndata: %s\n\n" % (new.version, _json.encode(patch))


def current_event(state: EnvironmentState) -> bytes:
    return b"event: current\nid: %d\ndata: {}\n\n" % state.version


class SnapshotFeed:
    def __init__(self, gate: Gate, hub: ChangeHub) -> None:
        self.gate = gate
        self.store = gate.store
        self.hub = hub  # its one timer wakes every stream with a keep-alive
        # per environment, the last state's patch event as (state, version it follows, event):
        # every stream sends the same bytes, encoded once per change rather than per stream
        self._patch_events: dict[str, tuple[EnvironmentState, int, bytes]] = {}

    def register(self, router: Router) -> None:
        for path in PATHS:
            router.add("GET", path, self.stream)

    async def stream(self, request: Request) -> Response | None:
        token = bearer_token(request.headers)
        if token is None:
            message = "a server key is required: Authorization: Bearer ssk_..."
            return Response(401, vane_error_body(401, message))
        caller = self.store.caller(token)
        if caller is None:
            return unknown_key(self.store, vane_error_body, [])
        if caller.key.kind != "server":
            message = "the snapshot feed needs a server key (ssk_) bound to an environment"
            return Response(403, vane_error_body(403, message))
        refused = self.gate.check_server_key(
            caller.key, request.headers.get(b"origin"), vane_error_body
        )
        if refused is not None:
            return refused
        state = self.store.get(caller.environment)
        if state is None:
            message = "the relay has not yet received this environment's snapshot"
            return Response(503, vane_error_body(503, message), [(b"retry-after", b"1")])
        await self._stream(request, state, caller.key.id)
        return None

    async def _stream(self, request: Request, state: EnvironmentState, key_id: str) -> None:
        send = request.send
        subscription = self.hub.subscribe(state.environment)
        watcher = DisconnectWatch(request.receive, subscription)
        try:
            request.started = True
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache, no-transform"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            first = current_event(state) if _resumes_at(request) == state.version else b""
            await send(
                {
                    "type": "http.response.body",
                    "body": first or snapshot_event(state),
                    "more_body": True,
                }
            )
            await self._follow(subscription, send, state, key_id)
        finally:
            self.hub.unsubscribe(subscription)
            watcher.cancel()

    async def _follow(
        self, subscription: Subscription, send: Send, sent: EnvironmentState, key_id: str
    ) -> None:
        """Each change as a patch from what this stream sent (a full snapshot if ours was
        replaced by an older or equal version); the end of the stream when the key is gone."""

        def render(change: Change) -> bytes | None:
            nonlocal sent
            state = change.state
            if not any(k.id == key_id for k in state.access.keys):
                return None  # the key was revoked (or moved): the stream ends
            if state.version > sent.version:
                body = self._patch_event(sent, state)
            elif state is not sent:
                body = snapshot_event(state)
            else:
                body = b""
            sent = state
            return body

        await follow(subscription, send, render)

    def _patch_event(self, old: EnvironmentState, new: EnvironmentState) -> bytes:
        """``patch_event``, encoded once for every stream that sent the version ``new`` was
        patched from (the stream that sent another gets the comparison of the two)."""
        cached = self._patch_events.get(new.environment)
        if cached is not None and cached[0] is new and cached[1] == old.version:
            return cached[2]
        event = patch_event(old, new)
        if new.patch is not None and new.patch.from_version == old.version:
            self._patch_events[new.environment] = (new, old.version, event)
        return event


def _resumes_at(request: Request) -> int | None:
    for value in (request.headers.get(b"last-event-id"), request.query("v")):
        if value:
            with contextlib.suppress(ValueError):
                return int(value)
    return None
