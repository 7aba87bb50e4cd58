"""Event endpoints: ingest (server, management or relay key) and inspection (management key)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import FromQuery, JSONBody, QueryParameter

from control_plane.auth import KeyKind, Principal, requires
from control_plane.deps import UNSERIALISED, Ctx
from control_plane.domain.events import schemas as s
from control_plane.domain.events import services
from control_plane.errors import FieldError, StrictBody, invalid_many, malformed
from shared.clock import now_ms
from shared.wire import body, events

INGEST = [requires(KeyKind.SERVER, KeyKind.MANAGEMENT, KeyKind.RELAY)]
Millis = Annotated[
    int | None, QueryParameter(ge=0, le=events.MAX_VALUE, description="epoch milliseconds")
]


class BatchBody(StrictBody[s.EventBatchIn]):
    """Decodes ``{"events": [...]}`` in one typed pass and checks every item; refuses the whole
    batch (422, each bad item's index and field) if any is invalid."""

    def decode_bytes(self, value: bytes) -> Any:
        try:
            items, problems = events.decode_batch(value, now_ms())
        except body.MalformedBody as exc:
            raise malformed(exc) from exc
        if problems:
            raise invalid_many([FieldError(field, message) for field, message in problems])
        return s.EventBatchIn(events=items)


class TrackBody(StrictBody[s.EventIn]):
    """One event: the event rules (``parse_one``) answer for its text, as for a batch's items."""

    check_text = False


class EventController(Controller):
    path = "/"
    tags = ["events"]
    opt = {UNSERIALISED: True}  # events never go into a snapshot: ingest runs in parallel

    @post(
        "/track",
        dto=TrackBody,
        return_dto=None,
        status_code=200,
        guards=INGEST,
        summary="Send one event",
    )
    async def track(
        self, ctx: Ctx, request: Request[Principal, Any, Any], data: JSONBody[s.EventIn]
    ) -> s.Ack:
        now = now_ms()
        item = services.parse_one(data, now)
        return await services.ingest(ctx, request.user.kind, [item], now, batch=False)

    @post(
        "/events",
        dto=BatchBody,
        return_dto=None,
        status_code=200,
        guards=INGEST,
        summary="Send a batch of up to 1000 events; refused whole if any item is invalid",
    )
    async def batch(
        self, ctx: Ctx, request: Request[Principal, Any, Any], data: JSONBody[s.EventBatchIn]
    ) -> s.Ack:
        now = now_ms()
        return await services.ingest(ctx, request.user.kind, data.events, now)

    @get("/events", guards=[requires(KeyKind.MANAGEMENT)], summary="Stored events, newest first")
    async def list_events(
        self,
        ctx: Ctx,
        event: FromQuery[str | None] = None,
        unit: FromQuery[str | None] = None,
        since: Millis = None,
        until: Millis = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        cursor: FromQuery[str | None] = None,
    ) -> s.EventPage:
        return await services.list_events(
            ctx, event=event, unit=unit, since=since, until=until, limit=limit, cursor=cursor
        )

    @get("/events/stats", guards=[requires(KeyKind.MANAGEMENT)], summary="Counts per event name")
    async def stats(self, ctx: Ctx, since: Millis = None, until: Millis = None) -> s.EventStats:
        return await services.stats(ctx, since=since, until=until)
