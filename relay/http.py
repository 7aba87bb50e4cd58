"""The relay's HTTP layer: a tiny hand-written ASGI application, no web framework.

A leaf: it imports nothing of the relay (``make lint`` holds it to that); the routes import it,
and ``relay/routes/compose.py`` puts the two together.

The relay answers one hot request — evaluate every client-side flag for a context — thousands of
times a second on one core, so the per-request floor of a framework (routing trees, dependency
injection, middleware stacks, response objects that re-encode headers) is most of the budget.
What is here instead: a dict router (exact paths, plus one trailing ``{param}`` per route),
a ``Request`` that reads headers into one dict and the body with a 1 MiB cap, a ``Response``
holding prebuilt header lists and already-encoded bytes, and CORS preflight answered by the
router for routes that browsers call.

Handlers are ``async (Request) -> Response | None``; ``None`` means the handler streamed its own
response through ``request.send`` (server-sent events) and set ``request.started``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from shared.wire.body import MAX_BODY_BYTES
from shared.wire.errors import encode_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


logger = logging.getLogger("vane.relay.http")

json_encode = msgspec.json.encode

Headers = list[tuple[bytes, bytes]]

CONTENT_JSON = (b"content-type", b"application/json")
VARY_ORIGIN = (b"vary", b"Origin")
EXPOSE = (b"access-control-expose-headers", b"ETag, Retry-After")
ALLOW_METHODS = b"GET, POST, OPTIONS"
ALLOW_HEADERS = b"Authorization, Content-Type, If-None-Match, X-API-Key"
PREFLIGHT_MAX_AGE = b"7200"  # Chromium caps preflight caching at two hours


class PayloadTooLarge(Exception):
    """The request body is larger than ``MAX_BODY_BYTES``."""


class Request:
    """One HTTP request: method, path, headers (lower-case byte names), lazily read body."""

    __slots__ = ("headers", "method", "param", "path", "receive", "scope", "send", "started")

    def __init__(self, scope: Scope, receive: Receive, send: Send, param: str | None) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.param = param
        # One dict of the raw headers; for a repeated header the last one wins.
        self.headers: dict[bytes, bytes] = dict(scope["headers"])
        self.started = False

    def query(self, name: str) -> str | None:
        raw: bytes = self.scope.get("query_string", b"")
        for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
            if key == name:
                return value
        return None

    async def body(self) -> bytes:
        """The whole request body; ``PayloadTooLarge`` beyond ``MAX_BODY_BYTES``."""
        length = self.headers.get(b"content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        if declared is not None and declared > MAX_BODY_BYTES:
            raise PayloadTooLarge
        message = await self.receive()
        body: bytes = message.get("body", b"")
        # granian sends a whole body with ``more_body`` set and then an empty last message; a
        # body as long as its Content-Length is complete, and waiting for that empty message
        # is a second hop between granian's thread and the loop (~10 µs of a ~90 µs request).
        if not message.get("more_body", False) or len(body) == declared:
            if len(body) > MAX_BODY_BYTES:
                raise PayloadTooLarge
            return body
        chunks = [body]
        size = len(body)
        while message.get("more_body", False):
            message = await self.receive()
            if message["type"] != "http.request":
                break  # the client went away; what we have is all there is
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise PayloadTooLarge
            chunks.append(chunk)
        return b"".join(chunks)


class Response:
    """A complete response: status, header list and encoded body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes = b"", headers: Headers | None = None) -> None:
        self.status = status
        self.body = body
        self.headers = headers if headers is not None else [CONTENT_JSON]

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


Handler = Callable[[Request], Awaitable[Response | None]]
CountRequest = Callable[[str, int], None]
"""Told the route name and status of every answered request (the relay's metrics)."""
ErrorBody = Callable[[int, str], bytes]
"""Encodes a route-independent error (status, message) in the API's own error shape."""


def vane_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """Vane's error shape (``shared.wire.errors``, the control plane's too)."""
    return encode_error(status, message, code=code, details=details)


def vane_error_body(status: int, message: str) -> bytes:
    return vane_error(status, message)


def ofrep_error_body(status: int, message: str) -> bytes:
    """OFREP's failure shape for errors that are about the request, not a flag or context."""
    return json_encode({"errorCode": "GENERAL", "errorDetails": message})


def cors_headers(origin: bytes | None) -> Headers:
    """JSON content type plus the CORS set every browser response carries.

    ``origin`` is reflected in ``Access-Control-Allow-Origin`` when given; pass ``None`` when the
    request had no Origin or the key's allow-list refuses it.
    """
    if origin is None:
        return [CONTENT_JSON, VARY_ORIGIN, EXPOSE]
    return [CONTENT_JSON, VARY_ORIGIN, EXPOSE, (b"access-control-allow-origin", origin)]


def preflight(request: Request) -> Response:
    """Answer a CORS preflight without a key: whether a key may call from here is checked later."""
    origin = request.headers.get(b"origin", b"*")
    return Response(
        204,
        headers=[
            VARY_ORIGIN,
            (b"access-control-allow-origin", origin),
            (b"access-control-allow-methods", ALLOW_METHODS),
            (b"access-control-allow-headers", ALLOW_HEADERS),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE),
        ],
    )


class Route:
    """A path (template) with its handlers per method and the shape of its errors."""

    __slots__ = ("cors", "error_body", "handlers", "name")

    def __init__(self, name: str, error_body: ErrorBody, cors: bool) -> None:
        self.name = name
        self.handlers: dict[str, Handler] = {}
        self.error_body = error_body
        self.cors = cors

    @property
    def allow(self) -> bytes:
        methods = sorted({*self.handlers, *(("OPTIONS",) if self.cors else ())})
        return ", ".join(methods).encode()


class Router:
    """Exact paths, and paths with one ``{param}`` segment (``/a/{key}`` or ``/a/{key}/b``)."""

    def __init__(self) -> None:
        self.exact: dict[str, Route] = {}
        self.prefixed: list[tuple[str, str, Route]] = []  # (before, after the parameter, route)

    def add(
        self,
        method: str,
        path: str,
        handler: Handler,
        *,
        error_body: ErrorBody = vane_error_body,
        cors: bool = False,
    ) -> None:
        """Route ``method path`` to ``handler``; ``cors`` answers preflights for the path."""
        route = self.exact.get(path) or next(
            (r for _, _, r in self.prefixed if r.name == path), None
        )
        if route is None:
            route = Route(path, error_body, cors)
            if "{" in path:
                prefix, _, rest = path.partition("{")
                suffix = rest.partition("}")[2]
                if "{" in suffix or not prefix.endswith("/") or suffix[:1] not in {"", "/"}:
                    raise ValueError(f"one whole-segment path parameter is supported: {path}")
                self.prefixed.append((prefix, suffix, route))
            else:
                self.exact[path] = route
        route.cors = route.cors or cors
        route.handlers[method] = handler

    def match(self, path: str) -> tuple[Route, str | None] | None:
        route = self.exact.get(path)
        if route is not None:
            return route, None
        for prefix, suffix, route in self.prefixed:
            if path.startswith(prefix) and path.endswith(suffix):
                param = path[len(prefix) : len(path) - len(suffix)]
                if param and "/" not in param:
                    return route, param
        return None


def error_response(status: int, body: bytes, origin: bytes | None = None) -> Response:
    return Response(status, body, cors_headers(origin))


class HttpApp:
    """The ASGI callable: route, run the handler, send, count."""

    def __init__(
        self,
        router: Router,
        count_request: CountRequest,
        *,
        on_stop: Sequence[Callable[[], None]] = (),
    ) -> None:
        self.router = router
        self.count_request = count_request
        self._on_stop = tuple(on_stop)

    def stopping(self) -> None:
        """The server was asked to stop: end what would hold it (open streams)."""
        for callback in self._on_stop:
            callback()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        found = self.router.match(path)
        if found is None:
            await self._plain(
                scope, send, "unmatched", 404, vane_error_body, f"no such endpoint: {path}"
            )
            return
        route, param = found
        method: str = scope["method"]
        handler = route.handlers.get(method)
        if handler is None:
            if method == "OPTIONS" and route.cors:
                handler = _preflight
            else:
                message = f"{method} is not allowed on {path}"
                extra = [(b"allow", route.allow)]
                await self._plain(scope, send, route.name, 405, route.error_body, message, extra)
                return
        request = Request(scope, receive, send, param)
        try:
            response = await handler(request)
        except Exception:
            if request.started:  # a stream whose client went away mid-send, most likely
                logger.debug("stream on %s ended with an error", path, exc_info=True)
                return
            logger.exception("unhandled error on %s %s", method, path)
            response = error_response(
                500, route.error_body(500, "internal error"), request.headers.get(b"origin")
            )
        if response is None:  # streamed by the handler itself
            self.count_request(route.name, 200)
            return
        self.count_request(route.name, response.status)
        await send(
            {"type": "http.response.start", "status": response.status, "headers": response.headers}
        )
        await send({"type": "http.response.body", "body": response.body})

    async def _plain(
        self,
        scope: Scope,
        send: Send,
        name: str,
        status: int,
        error_body: ErrorBody,
        message: str,
        extra: Headers | None = None,
    ) -> None:
        origin = dict(scope["headers"]).get(b"origin")
        response = error_response(status, error_body(status, message), origin)
        if extra:
            response.headers.extend(extra)
        self.count_request(name, status)
        await response.send(send)


async def _preflight(request: Request) -> Response:
    return preflight(request)
