"""Event intake on the relay: spooled durably (fsync) before the answer, forwarded upstream.

- ``POST /api/v1/track`` (one event) and ``POST /api/v1/events`` (``{"events": [...]}``, ≤ 1000)
  with a server key (``ssk_``), as on the control plane;
- ``POST /sdk/v1/events`` (``{"events": [...]}``) with a public key, from browsers. ``sendBeacon``
  cannot set headers, so the key may also come as ``?key=pk_…``, and any content type is read as
  JSON.

Events are checked with the control plane's own rules (``shared.wire.events``), so a bad event is
refused here with the same 422. An event without ``eventId`` gets one now, and ``ts`` defaults to
the relay's receipt time, so a batch forwarded twice after a crash is counted once and keeps its
time. The answer is ``{"accepted": n, "duplicates": 0, "spooled": true}``: duplicates are known only
upstream. A full spool answers 503 with ``Retry-After``.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from relay.http import Request, Response, Router, vane_error, vane_error_body
from relay.routes import Admission, Browser, bearer_token, unknown_key
from relay.spool import Spool, SpoolFull
from shared.wire import events

RETRY_AFTER_S = b"5"


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    events: list[Any]


class EventIntake:
    def __init__(self, spool: Spool, browser: Browser) -> None:
        self.spool = spool
        self.browser = browser
        self.store = browser.store
        self._ids = events.EventIds("rly")

    def register(self, router: Router) -> None:
        router.add("POST", "/api/v1/track", self.track)
        router.add("POST", "/api/v1/events", self.batch)
        router.add("POST", "/sdk/v1/events", self.browser_events, cors=True)

    def _record(self, item: events.EventIn, now: int, source: str) -> dict[str, Any]:
        record: dict[str, Any] = {"unit": item.unit, "event": item.event, "source": source}
        record["eventId"] = item.event_id if item.event_id is not None else self._ids.next()
        record["ts"] = item.ts if item.ts is not None else now
        if item.value is not None:
            record["value"] = int(item.value)
        if item.currency is not None:
            record["currency"] = item.currency
        if item.props is not None:
            record["props"] = item.props
        if item.url is not None:
            record["url"] = item.url
        return record

    async def _spool(
        self, records: list[dict[str, Any]], headers: list[tuple[bytes, bytes]]
    ) -> Response:
        try:
            await self.spool.append(records)
        except SpoolFull:
            headers = [*headers, (b"retry-after", RETRY_AFTER_S)]
            return Response(
                503,
                vane_error(503, "the relay's event spool is full; retry later", code="spool_full"),
                headers,
            )
        body = msgspec.json.encode({"accepted": len(records), "duplicates": 0, "spooled": True})
        return Response(200, body, headers)

    def _server_key(self, request: Request) -> Response | None:
        token = bearer_token(request.headers)
        if token is None:
            return Response(
                401,
                vane_error_body(401, "a server key is required: Authorization: Bearer ssk_..."),
                [],
            )
        caller = self.store.caller(token)
        if caller is None:
            return unknown_key(self.store, vane_error_body, [])
        if caller.key.kind != "server":
            return Response(
                403, vane_error_body(403, "this endpoint needs a server key (ssk_)"), []
            )
        return None

    async def _body(self, request: Request) -> bytes | Response:
        from relay.http import PayloadTooLarge

        try:
            return await request.body()
        except PayloadTooLarge:
            return Response(
                413, vane_error_body(413, "request body is larger than the limit of 1 MiB"), []
            )

    async def track(self, request: Request) -> Response:
        refused = self._server_key(request)
        if refused is not None:
            return refused
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        now = time.time_ns() // 1_000_000
        try:
            item = msgspec.json.decode(raw, type=events.EventIn, strict=True)
        except msgspec.ValidationError as exc:
            return _invalid([events.convert_problem("", exc)], [])
        except msgspec.DecodeError as exc:
            return Response(
                400,
                vane_error(400, f"request body is not valid JSON: {exc}", code="malformed_json"),
                [],
            )
        problems = events.check_event(item, now)
        if item.source is not None:
            problems.append(("source", "only relays say where an event came from"))
        if problems:
            return _invalid(problems, [])
        return await self._spool([self._record(item, now, "server")], [])

    async def batch(self, request: Request) -> Response:
        refused = self._server_key(request)
        if refused is not None:
            return refused
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        return await self._accept(raw, "server", [])

    async def browser_events(self, request: Request) -> Response:
        key = request.query("key")
        if key and b"authorization" not in request.headers:
            request.headers[b"authorization"] = b"Bearer " + key.encode()
        admitted = await self.browser.admit(request, vane_error_body)
        if not isinstance(admitted, Admission):
            return admitted
        return await self._accept(admitted.body, "browser", admitted.headers)

    async def _accept(
        self, raw: bytes, source: str, headers: list[tuple[bytes, bytes]]
    ) -> Response:
        now = time.time_ns() // 1_000_000
        try:
            body = msgspec.json.decode(raw, type=_Batch, strict=True)
        except msgspec.ValidationError as exc:
            return _invalid([events.convert_problem("", exc)], headers)
        except msgspec.DecodeError as exc:
            return Response(
                400,
                vane_error(400, f"request body is not valid JSON: {exc}", code="malformed_json"),
                headers,
            )
        items, problems = events.parse_batch(body.events, now)
        problems.extend(
            (f"events[{i}].source", "only relays say where an event came from")
            for i, item in enumerate(items)
            if item.source is not None
        )
        if problems:
            return _invalid(problems, headers)
        return await self._spool([self._record(item, now, source) for item in items], headers)


def _invalid(problems: list[events.Problem], headers: list[tuple[bytes, bytes]]) -> Response:
    first_field, first_message = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    body = vane_error(422, f"{first_field}: {first_message}{more}", details=tuple(problems))
    return Response(422, body, headers)


def registrar(spool: Spool) -> Any:
    """The ``extra_routes`` hook of ``relay.http.build_http_app`` for event intake."""

    def register(router: Router, browser: Browser) -> None:
        EventIntake(spool, browser).register(router)
        browser.metrics.register_gauge_callback(
            "event_spool_events",
            "Events spooled and not yet forwarded.",
            lambda: spool.pending_events,
        )
        browser.metrics.register_gauge_callback(
            "event_spool_bytes",
            "Bytes of the spool not yet forwarded.",
            lambda: spool.pending_bytes,
        )
        browser.metrics.register_gauge_callback(
            "events_forwarded",
            "Events forwarded upstream since start.",
            lambda: spool.forwarded_events,
        )

    return register
