"""Event bodies. Items are checked one by one so a refused batch names every bad item."""

from __future__ import annotations

from typing import Any, Literal

from control_plane.domain.schemas import ApiIn, ApiOut

Source = Literal["server", "management", "relay", "browser"]


class EventIn(ApiIn):
    unit: str
    event: str
    value: int | float | None = None  # a float is refused with a message about minor units
    currency: str | None = None
    props: dict[str, Any] | None = None
    url: str | None = None
    ts: int | None = None
    event_id: str | None = None
    source: Source | None = None  # relays say where a forwarded event came from


class EventBatchIn(ApiIn):
    events: list[Any]


class Ack(ApiOut):
    accepted: int
    duplicates: int


class EventOut(ApiOut):
    id: int
    unit: str
    event: str
    ts: int
    received_at: int
    source: str
    event_id: str | None = None
    value: int | None = None
    currency: str | None = None
    props: dict[str, Any] | None = None
    url: str | None = None


class EventPage(ApiOut):
    events: list[EventOut]
    next_cursor: str | None


class EventStat(ApiOut):
    event: str
    count: int
    units: int
    first_ts: int
    last_ts: int


class EventStats(ApiOut):
    events: list[EventStat]
    total: int
