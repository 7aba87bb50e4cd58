"""OFREP change notifications: ``GET /ofrep/v1/events?token=...`` as server-sent events.

A browser ``EventSource`` cannot send headers, so the bulk evaluation response names a URL that
carries its own credential: ``base64url(["<environment>", "<key id>", <expiry>]) + "." +
base64url(HMAC-SHA256(sse_secret, that JSON))``. Tokens are minted per time window of half their
lifetime (and cached for it): any token handed out has between half and all of
``sse_token_ttl_s`` left, and the bulk ETag includes the window, so a client that keeps getting
304s still holds a token with at least half its lifetime left. The token is only checked when the
stream opens; an open stream ends when its key leaves the environment's access (revoked).

The stream: ``retry:`` first, then for every new snapshot version of the environment, the moment
the store swaps it, ``id: <version>`` + ``data: {"type": "refetchEvaluation", "etag",
"lastModified"}``, and a keep-alive comment every ``keepalive_s`` (one timer for all streams). The
URL also carries ``v``, the version the bulk response was computed from, and reconnects carry
``Last-Event-ID``: when the current version differs, the first event is sent at once, so a change
between the bulk fetch and the stream opening is not lost.

A relay holds at most ``max_streams`` (``VANE_RELAY_MAX_STREAMS``) streams; one more is refused
with 503 and ``Retry-After`` (the OFREP web provider then polls), and ``vane_relay_sse_streams``
in ``/metrics`` says how many are open. Streams of an environment the relay stops serving end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import time
from collections.abc import Callable
from typing import Any

import msgspec

from relay.http import (
    EXPOSE,
    VARY_ORIGIN,
    Receive,
    Request,
    Response,
    Router,
    Send,
    cors_headers,
    json_encode,
    ofrep_error_body,
)
from relay.routes.admission import Gate
from relay.routes.callers import origin_allowed
from relay.store import EnvironmentState, Store

EVENTS_PATH = "/ofrep/v1/events"
RETRY_MS = 1000
RETRY_FULL_S = b"30"  # a refused stream: the OFREP web provider polls meanwhile

_claims = msgspec.json.Decoder(tuple[str, str, int])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    """Mints and checks the HMAC-signed tokens in event-stream URLs."""

    def __init__(self, secret: bytes, ttl_s: int) -> None:
        self.secret = secret
        self.half = max(1, ttl_s // 2)
        self._minted: dict[tuple[str, str], tuple[int, str]] = {}

    def window(self, now: float) -> int:
        return int(now) // self.half

    def issue(self, environment: str, key_id: str, now: float) -> str:
        window = int(now) // self.half
        cached = self._minted.get((environment, key_id))
        if cached is not None and cached[0] == window:
            return cached[1]
        expiry = (window + 2) * self.half  # between ttl/2 and ttl from now
        claims = json_encode((environment, key_id, expiry))
        signature = hmac.digest(self.secret, claims, "sha256")
        token = f"{_b64(claims)}.{_b64(signature)}"
        self._minted[(environment, key_id)] = (window, token)
        return token

    def verify(self, token: str, now: float) -> tuple[str, str] | None:
        """``(environment, key id)`` of a genuine, unexpired token, else None."""
        encoded, dot, signature = token.partition(".")
        if not dot:
            return None
        try:
            claims = _unb64(encoded)
            given = _unb64(signature)
        except ValueError:
            return None
        if not hmac.compare_digest(hmac.digest(self.secret, claims, "sha256"), given):
            return None
        try:
            environment, key_id, expiry = _claims.decode(claims)
        except msgspec.DecodeError:
            return None
        if expiry <= now:
            return None
        return environment, key_id


class Change:
    """A new state as every stream of its environment needs it, computed once per swap."""

    __slots__ = ("event", "public_keys", "state")

    def __init__(self, state: EnvironmentState) -> None:
        self.state = state
        self.event = refetch_event(state)
        self.public_keys = {k.id: k for k in state.access.keys if k.kind == "public"}


class Subscription:
    """One open stream's mailbox: the latest change, whether the client left, and a wake-up.

    The wake-up is a bare future per wait rather than an ``asyncio.Event`` (which keeps a deque
    of waiters): a few hundred bytes less per stream, which counts at 10,000 streams.
    """

    __slots__ = ("_waiter", "_woken", "change", "closed", "environment")

    def __init__(self, environment: str) -> None:
        self.environment = environment
        self.change: Change | None = None
        self.closed = False
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until ``wake()`` (at once if it was called since the last wait)."""
        if not self._woken:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        self._woken = False

    def close(self) -> None:
        self.closed = True
        self.wake()


class ChangeHub:
    """One store listener fanning swaps out to the open streams of each environment.

    A swap sets one ``asyncio.Event`` per open stream of the environment and nothing else, so
    thousands of open browsers hear of a kill switch within one turn of the event loop.
    """

    def __init__(self, store: Store, *, keepalive_s: float = 15.0) -> None:
        self.store = store
        self.keepalive_s = keepalive_s
        self._ticker: asyncio.Task[None] | None = None
        self._streams: dict[str, set[Subscription]] = {}
        self._count = 0
        self._listening = False

    def subscribe(self, environment: str) -> Subscription:
        if not self._listening:
            self.store.listen(self._on_swap)
            self.store.listen_removals(self._on_removal)
            self._listening = True
        subscription = Subscription(environment)
        self._streams.setdefault(environment, set()).add(subscription)
        self._count += 1
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._keepalives())
        return subscription

    async def _keepalives(self) -> None:
        """Wake every open stream each ``keepalive_s`` (it sends a comment if nothing else):
        one timer for all streams rather than one per stream. Ends when no stream is left."""
        try:
            while self._count:
                await asyncio.sleep(self.keepalive_s)
                for streams in list(self._streams.values()):
                    for subscription in list(streams):
                        subscription.wake()
        finally:
            self._ticker = None

    def unsubscribe(self, subscription: Subscription) -> None:
        streams = self._streams.get(subscription.environment)
        if streams is not None and subscription in streams:
            streams.discard(subscription)
            self._count -= 1
            if not streams:
                del self._streams[subscription.environment]

    def open_streams(self) -> int:
        return self._count

    def close_all(self) -> None:
        """The relay is stopping: end every open stream now (each sends its end and returns),
        so clients reconnect elsewhere at once rather than when the process is gone."""
        for streams in list(self._streams.values()):
            for subscription in list(streams):
                subscription.close()

    def _on_removal(self, environment: str) -> None:
        """The relay no longer serves ``environment``: end its streams."""
        for subscription in list(self._streams.get(environment, ())):
            subscription.close()

    def _on_swap(self, state: EnvironmentState) -> None:
        streams = self._streams.get(state.environment)
        if not streams:
            return
        change = Change(state)
        for subscription in streams:
            subscription.change = change
            subscription.wake()


def _last_modified(state: EnvironmentState) -> int:
    generated = state.snapshot.generated_at
    return generated // 1000 if generated else int(state.received_at)


def refetch_event(state: EnvironmentState) -> bytes:
    data = json_encode(
        {"type": "refetchEvaluation", "etag": state.etag, "lastModified": _last_modified(state)}
    )
    return b"id: %d\ndata: %s\n\n" % (state.version, data)


async def _close_on_disconnect(receive: Receive, subscription: Subscription) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            subscription.close()
            return


class DisconnectWatch:
    """Closes a subscription when its client disconnects.

    Under granian, ``receive()`` returns a future-like object: a done-callback re-arms it, so a
    stream costs no task of its own (~2 KiB each; this matters at 10,000 streams). Other
    servers' ``receive`` (a coroutine) get a task.
    """

    __slots__ = ("_pending", "_receive", "_subscription", "_task")

    def __init__(self, receive: Receive, subscription: Subscription) -> None:
        self._receive = receive
        self._subscription = subscription
        self._pending: Any = None
        self._task: asyncio.Task[None] | None = None
        self._arm()

    def _arm(self) -> None:
        awaitable = self._receive()
        if asyncio.isfuture(awaitable):
            self._pending = awaitable
            awaitable.add_done_callback(self._heard)
        else:
            self._task = asyncio.ensure_future(_after_first(awaitable, self))

    def _heard(self, future: Any) -> None:
        self._pending = None
        if self._subscription.closed:
            return
        try:
            message = future.result()
        except BaseException:  # the connection is gone either way
            self._subscription.close()
            return
        if message["type"] == "http.disconnect":
            self._subscription.close()
        else:
            self._arm()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        pending, self._pending = self._pending, None
        if pending is not None:
            with contextlib.suppress(Exception):
                pending.remove_done_callback(self._heard)


async def _after_first(first: Any, watch: DisconnectWatch) -> None:
    message = await first
    if message["type"] == "http.disconnect":
        watch._subscription.close()
        return
    await _close_on_disconnect(watch._receive, watch._subscription)


def _error(status: int, message: str, origin: bytes | None) -> Response:
    return Response(status, ofrep_error_body(status, message), cors_headers(origin))


class EventStreams:
    """The event-stream endpoint and the ``eventStreams`` entries that point at it."""

    def __init__(self, gate: Gate, *, keepalive_s: float = 15.0) -> None:
        self.gate = gate
        self.store = gate.store
        self.tokens = StreamTokens(gate.settings.sse_secret, gate.settings.sse_token_ttl_s)
        self.hub = ChangeHub(gate.store, keepalive_s=keepalive_s)
        self.keepalive_s = keepalive_s
        self.max_streams = gate.settings.max_streams
        self.refused_full = 0

    def register(self, router: Router) -> None:
        router.add("GET", EVENTS_PATH, self.events, cors=True)

    def entry(self, request: Request, environment: str, key_id: str, version: int) -> bytes:
        """The JSON ``eventStreams`` array for a bulk response to ``request``."""
        headers = request.headers
        scope = request.scope
        forwarded = headers.get(b"x-forwarded-proto")
        if forwarded:
            scheme = forwarded.split(b",", 1)[0].strip().decode("latin-1")
        else:
            scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
        host_header = headers.get(b"host")
        if host_header:
            host = host_header.decode("latin-1")
        else:
            server = scope.get("server") or ("localhost", None)
            host = server[0] if server[1] is None else f"{server[0]}:{server[1]}"
        token = self.tokens.issue(environment, key_id, time.time())
        root = scope.get("root_path", "")
        url = f"{scheme}://{host}{root}{EVENTS_PATH}?token={token}&v={version}"
        return b'[{"type":"sse","url":' + json_encode(url) + b',"inactivityDelaySec":120}]'

    async def events(self, request: Request) -> Response | None:
        origin = request.headers.get(b"origin")
        token = request.query("token")
        claims = self.tokens.verify(token, time.time()) if token else None
        if claims is None:
            return _error(401, "missing, invalid or expired stream token", origin)
        environment, key_id = claims
        state = self.store.get(environment)
        if state is None:
            return _error(503, "relay has no snapshot yet", origin)
        key = next((k for k in state.access.keys if k.id == key_id and k.kind == "public"), None)
        if key is None:
            return _error(401, "unknown or revoked key", origin)
        refused = self.gate.check_key(key, origin, ofrep_error_body)
        if refused is not None:
            return refused
        if self.hub.open_streams() >= self.max_streams:
            self.refused_full += 1
            response = _error(503, "this relay holds its maximum of event streams", origin)
            response.headers.append((b"retry-after", RETRY_FULL_S))
            return response
        await self._stream(request, state, key_id, origin)
        return None

    def _seen_version(self, request: Request) -> int | None:
        for value in (request.headers.get(b"last-event-id"), request.query("v")):
            if value:
                with contextlib.suppress(ValueError):
                    return int(value)
        return None

    async def _open(self, request: Request, state: EnvironmentState, origin: bytes | None) -> None:
        """The response head and first chunk (in a frame of their own: not kept per stream)."""
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache, no-transform"),
            (b"x-accel-buffering", b"no"),
            VARY_ORIGIN,
            EXPOSE,
        ]
        if origin is not None:
            headers.append((b"access-control-allow-origin", origin))
        await request.send({"type": "http.response.start", "status": 200, "headers": headers})
        first = b"retry: %d\n: vane relay event stream\n\n" % RETRY_MS
        seen = self._seen_version(request)
        if seen is not None and seen != state.version:
            first += refetch_event(state)
        await request.send({"type": "http.response.body", "body": first, "more_body": True})

    async def _stream(
        self, request: Request, state: EnvironmentState, key_id: str, origin: bytes | None
    ) -> None:
        send = request.send
        subscription = self.hub.subscribe(state.environment)
        watcher = DisconnectWatch(request.receive, subscription)
        try:
            request.started = True
            await self._open(request, state, origin)
            request.headers = {}  # not needed any more; a stream lives long and there are many

            def render(change: Change) -> bytes | None:
                key = change.public_keys.get(key_id)
                if key is None or (origin is not None and not origin_allowed(key, origin)):
                    return None  # revoked, or no longer allowed from this origin
                return change.event

            await follow(subscription, send, render)
        finally:
            self.hub.unsubscribe(subscription)
            watcher.cancel()


_END = {"type": "http.response.body", "body": b"", "more_body": False}


async def follow(
    subscription: Subscription, send: Send, render: Callable[[Change], bytes | None]
) -> None:
    """Write each change to an open stream as ``render`` encodes it (``None`` ends the stream,
    ``b""`` sends nothing), a keep-alive comment when woken without one, until the client leaves
    or the environment is removed. Shared by the OFREP event streams and the snapshot feed."""
    while True:
        await subscription.wait()
        if subscription.closed:  # the client left, or the environment was removed
            with contextlib.suppress(Exception):
                await send(_END)
            return
        change, subscription.change = subscription.change, None
        if change is None:
            body: bytes | None = b": keep-alive\n\n"
        else:
            body = render(change)
            if body is None:
                await send(_END)
                return
        if body:
            await send({"type": "http.response.body", "body": body, "more_body": True})
