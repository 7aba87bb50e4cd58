"""Event bodies. Items are checked one by one so a refused batch names every bad item."""

from __future__ import annotations

from typing import Any

from control_plane.domain.schemas import ApiIn, ApiOut
from shared.wire import events

EventIn = events.EventIn


class EventBatchIn(ApiIn):
    events: list[Any]


class Ack(ApiOut):
    accepted: int  # stored now
    duplicates: int  # ids stored before (or earlier in the batch): counted once, never again
    conflicts: int = 0  # those duplicates whose payload differs from the one stored


class EventOut(ApiOut):
    event_id: str  # the sender's, or the one given where the event was first stored
    unit: str
    event: str
    ts: int
    received_at: int
    source: str
    value: int | None = None
    currency: str | None = None
    props: dict[str, Any] | None = None
    url: str | None = None


class EventPage(ApiOut):
    events: list[EventOut]
    next_cursor: str | None
    has_more: bool = False


class EventStat(ApiOut):
    event: str
    count: int
    units: int
    first_ts: int
    last_ts: int


class EventStats(ApiOut):
    events: list[EventStat]
    total: int
