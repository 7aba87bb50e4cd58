"""Event intake on the relay: spooled durably (fsync) before the answer, forwarded upstream.

- ``POST /api/v1/track`` (one event) and ``POST /api/v1/events`` (``{"events": [...]}``, ≤ 1000)
  with a server or management key, as on the control plane (also under ``/v1``);
- ``POST /sdk/v1/events`` (``{"events": [...]}``) with a public key, from browsers. ``sendBeacon``
  cannot set headers, so the key may also come as ``?key=pk_…``, and any content type is read as
  JSON.

Events are checked with the control plane's own rules (``shared.wire.events``), so a bad event is
refused here with the same 422. Trust follows the key: a page may not send ``$`` names (exposures
are what the relay itself records of its assignments and evaluations), and a backend's
``$exposure`` must name a running experiment and the unit's deterministic variant, checked against
the relay's snapshot. An event without ``eventId`` gets one now, and ``ts`` defaults to the
relay's receipt time, so a batch forwarded twice after a crash is counted once and keeps its time.

The answer is ``{"accepted": n, "duplicates": m, "spooled": true}``: ``duplicates`` counts
repeats of an ``eventId`` within the request (spooled once); repeats of ids stored earlier are
known only upstream, which stores them once. A full spool answers 503 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from relay.http import (
    CONTENT_JSON,
    PayloadTooLarge,
    Request,
    Response,
    Router,
    vane_error,
    vane_error_body,
)
from relay.routes.admission import Admission, Gate
from relay.routes.callers import bearer_token, unknown_key
from relay.spool import Spool, SpoolFull
from relay.store import EnvironmentState
from shared.clock import now_ms
from shared.engine.experiments import (
    experiments_holdouts,
    exposure_claim_problem,
    flag_exposure_claim_problem,
)
from shared.keys import SERVER_KEY_FROM_PAGE
from shared.wire import body, events
from shared.wire.kinds import qualified_unit, redact

RETRY_AFTER_S = b"5"
BACKENDS: dict[str, events.Source] = {"server": "server", "management": "management"}


class EventIntake:
    def __init__(self, spool: Spool, gate: Gate) -> None:
        self.spool = spool
        self.gate = gate
        self.store = gate.store
        self._ids = events.EventIds("rly")

    def register(self, router: Router) -> None:
        for prefix in ("/api/v1", "/v1"):
            router.add("POST", f"{prefix}/track", self.track)
            router.add("POST", f"{prefix}/events", self.batch)
        router.add("POST", "/sdk/v1/events", self.browser_events, cors=True)

    def _record(
        self, item: events.EventIn, now: int, source: str, private: tuple[str, ...]
    ) -> dict[str, Any]:
        record: dict[str, Any] = {"unit": item.unit, "event": item.event, "source": source}
        if item.unit_kind is not None:
            record["unitKind"] = item.unit_kind
        record["eventId"] = item.event_id if item.event_id is not None else self._ids.next()
        record["ts"] = item.ts if item.ts is not None else now
        if item.value is not None:
            record["value"] = int(item.value)
        if item.currency is not None:
            record["currency"] = item.currency
        props = item.props
        if private:
            props = redact(props, private)  # the key's private attributes are never spooled
        if props is not None:
            record["props"] = props
        if item.url is not None:
            record["url"] = item.url
        return record

    async def _spool(
        self, records: list[dict[str, Any]], duplicates: int, headers: list[tuple[bytes, bytes]]
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
        answer = {"accepted": len(records), "duplicates": duplicates, "spooled": True}
        return Response(200, msgspec.json.encode(answer), headers)

    def _backend_key(self, request: Request) -> tuple[events.Source, tuple[str, ...]] | Response:
        """The kind of a server or management key and its private attributes, or the refusal
        (401 unknown, 403 other kind)."""
        token = bearer_token(request.headers)
        if token is None:
            message = "a server key is required: Authorization: Bearer ssk_..."
            return Response(401, vane_error_body(401, message), [CONTENT_JSON])
        caller = self.store.caller(token)
        if caller is None:
            return unknown_key(self.store, vane_error_body, [CONTENT_JSON])
        sender = BACKENDS.get(caller.key.kind)
        if sender is None:
            message = "this endpoint needs a server key (ssk_) or a management key (vsk_)"
            return Response(403, vane_error_body(403, message), [CONTENT_JSON])
        if sender == "server" and request.headers.get(b"origin") is not None:
            return Response(403, vane_error_body(403, SERVER_KEY_FROM_PAGE), [CONTENT_JSON])
        # a backend's events travel upstream under the relay's key: its own limit is kept here
        limited = self.gate.rates.check(caller.key.id, None, vane_error_body)
        if limited is not None:
            return limited
        return sender, caller.key.private_attributes

    async def _body(self, request: Request) -> bytes | Response:
        try:
            return await request.body()
        except PayloadTooLarge:
            return Response(
                413,
                vane_error_body(413, "request body is larger than the limit of 1 MiB"),
                [CONTENT_JSON],
            )

    async def track(self, request: Request) -> Response:
        backend = self._backend_key(request)
        if isinstance(backend, Response):
            return backend
        kind, private = backend
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        now = now_ms()
        try:
            item, problems = events.decode_one(raw, now)
        except body.MalformedBody as exc:
            return malformed(exc, [CONTENT_JSON])
        if item is not None:
            problems.extend(self._sender_problems(item, kind, ""))
        if problems or item is None:
            return invalid(problems, [CONTENT_JSON])
        return await self._spool([self._record(item, now, kind, private)], 0, [CONTENT_JSON])

    async def batch(self, request: Request) -> Response:
        backend = self._backend_key(request)
        if isinstance(backend, Response):
            return backend
        raw = await self._body(request)
        if isinstance(raw, Response):
            return raw
        return await self._accept(raw, *backend, [CONTENT_JSON])

    async def browser_events(self, request: Request) -> Response:
        admitted = await self.gate.admit(request, vane_error_body)
        if not isinstance(admitted, Admission):
            return admitted
        private = admitted.caller.key.private_attributes
        return await self._accept(admitted.body, "browser", private, admitted.headers)

    def _sender_problems(
        self, item: events.EventIn, sender: events.Source, prefix: str
    ) -> list[events.Problem]:
        problems = events.sender_problems(item, sender, prefix)
        if not problems and sender in BACKENDS and item.event in events.EXPOSURE_EVENTS:
            problem = self._claim_problem(item)
            if problem is not None:
                problems.append((prefix + problem[0], problem[1]))
        return problems

    def _claim_problem(self, item: events.EventIn) -> tuple[str, str] | None:
        """A backend's exposure, checked against the snapshot (running experiments, live flags)."""
        state = _any_state(self.store.states)
        if state is None:
            return "event", "the relay has no snapshot yet to check this exposure against"
        if item.event == events.FLAG_EXPOSURE:

            def variations(key: str) -> set[int] | None:
                flag = state.snapshot.flags.get(key)
                return None if flag is None else {v.idx for v in flag.variations}

            return flag_exposure_claim_problem(item.props, variations)

        experiments = state.snapshot.experiments
        holdouts = experiments_holdouts(experiments.values())  # those holding a running one
        unit = qualified_unit(item.unit_kind, item.unit)  # as the experiment hashes it
        return exposure_claim_problem(item.props, unit, experiments.get, holdouts.get)

    async def _accept(
        self,
        raw: bytes,
        sender: events.Source,
        private: tuple[str, ...],
        headers: list[tuple[bytes, bytes]],
    ) -> Response:
        now = now_ms()
        try:
            items, problems = events.decode_batch(raw, now)
        except body.MalformedBody as exc:
            return malformed(exc, headers)
        for index, item in enumerate(items):
            problems.extend(self._sender_problems(item, sender, events.item_prefix(index)))
        if problems:
            return invalid(problems, headers)
        records: list[dict[str, Any]] = []
        seen: set[str] = set()
        for item in items:
            if item.event_id is not None:
                if item.event_id in seen:
                    continue
                seen.add(item.event_id)
            records.append(self._record(item, now, sender, private))
        return await self._spool(records, len(items) - len(records), headers)


def _any_state(states: dict[str, EnvironmentState]) -> EnvironmentState | None:
    """Running experiments are the project's, in every environment's snapshot alike."""
    return next(iter(states.values()), None)


def malformed(exc: body.MalformedBody, headers: list[tuple[bytes, bytes]]) -> Response:
    return Response(400, vane_error(400, exc.message, code="malformed_json"), headers)


def invalid(problems: list[events.Problem], headers: list[tuple[bytes, bytes]]) -> Response:
    first_field, first_message = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    body_ = vane_error(422, f"{first_field}: {first_message}{more}", details=tuple(problems))
    return Response(422, body_, headers)


def register(router: Router, gate: Gate, spool: Spool) -> None:
    """Event intake, and the spool's gauges."""
    EventIntake(spool, gate).register(router)
    gate.metrics.register_gauge_callback(
        "event_spool_events",
        "Events spooled and not yet forwarded.",
        lambda: spool.pending_events,
    )
    gate.metrics.register_gauge_callback(
        "event_spool_bytes",
        "Bytes of the spool not yet forwarded.",
        lambda: spool.pending_bytes,
    )
    gate.metrics.register_gauge_callback(
        "events_forwarded",
        "Events forwarded upstream since start.",
        lambda: spool.forwarded_events,
    )
