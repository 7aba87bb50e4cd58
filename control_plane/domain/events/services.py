"""Event ingest and inspection.

Exactly once: the insert is ``INSERT … ON CONFLICT (project_id, event_id) DO NOTHING`` in one
statement per batch, on PostgreSQL and SQLite alike, so a repeat — in
the same batch, a later one, or a concurrent request on another replica — is never stored
twice; whatever the database skipped is reported as a duplicate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import func, select, text

from control_plane.auth import KeyKind
from control_plane.db.models import Event
from control_plane.domain.common import Scope
from control_plane.domain.events import schemas as s
from control_plane.domain.events.store import insert_events
from control_plane.domain.experiments.exposures import EXPERIMENT_EXPOSURE, FLAG_EXPOSURE
from control_plane.domain.experiments.exposures import from_events as record_exposures
from control_plane.errors import ApiError, FieldError, invalid_many
from shared.wire import events

EXPOSURE_EVENTS = frozenset({EXPERIMENT_EXPOSURE, FLAG_EXPOSURE})
_SOURCES = {KeyKind.SERVER: "server", KeyKind.MANAGEMENT: "management", KeyKind.RELAY: "relay"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _refuse(problems: list[events.Problem]) -> None:
    if problems:
        raise invalid_many([FieldError(field, message) for field, message in problems])


def parse_one(item: s.EventIn, now: int) -> s.EventIn:
    _refuse(events.check_event(item, now))
    return item


def _source(kind: KeyKind, items: Sequence[s.EventIn]) -> str:
    """Where the items came from: the key's kind, unless a relay names each item's own."""
    if kind is not KeyKind.RELAY:
        for index, item in enumerate(items):
            if item.source is not None:
                field = "source" if len(items) == 1 else f"events[{index}].source"
                raise invalid_many([FieldError(field, "only relays say where an event came from")])
    return _SOURCES.get(kind, "server")


async def ingest(scope: Scope, kind: KeyKind, items: Sequence[s.EventIn], now: int) -> s.Ack:
    if not items:
        return s.Ack(accepted=0, duplicates=0)
    inserted = await insert_events(
        scope.session,
        items,
        project_id=scope.project_id,
        received_at=now,
        source=_source(kind, items),
    )
    exposures = [
        {"event": i.event, "unit": i.unit, "ts": now if i.ts is None else i.ts, "props": i.props}
        for i in items
        if i.event in EXPOSURE_EVENTS
    ]
    if exposures:
        await record_exposures(scope.session, scope.project_id, exposures)
    return s.Ack(accepted=inserted, duplicates=len(items) - inserted)


def _event_out(row: Event) -> s.EventOut:
    return s.EventOut(
        event_id=row.event_id,
        unit=row.unit,
        event=row.event,
        ts=row.ts,
        received_at=row.received_at,
        source=row.source,
        value=row.value,
        currency=row.currency,
        props=row.props,
        url=row.url,
    )


# The project's event names, one index probe each (a loose scan of ix_events_analysis).
_EVENT_NAMES = text(
    "WITH RECURSIVE names(event) AS ("
    " SELECT (SELECT event FROM events WHERE project_id = :project ORDER BY event LIMIT 1)"
    " UNION ALL"
    " SELECT (SELECT e.event FROM events e WHERE e.project_id = :project AND e.event > n.event"
    " ORDER BY e.event LIMIT 1) FROM names n WHERE n.event IS NOT NULL"
    ") SELECT event FROM names WHERE event IS NOT NULL"
)


async def list_events(
    scope: Scope,
    *,
    event: str | None,
    unit: str | None,
    since: int | None,
    until: int | None,
    limit: int,
    cursor: str | None,
) -> s.EventPage:
    query = select(Event).where(Event.project_id == scope.project_id)
    if event is not None:
        query = query.where(Event.event == event)
    if unit is not None:
        query = query.where(Event.unit == unit)
        if event is None:  # (project, event, unit) is indexed: name every event name
            names = await scope.session.scalars(_EVENT_NAMES, {"project": scope.project_id})
            query = query.where(Event.event.in_(list(names)))
    if since is not None:
        query = query.where(Event.ts >= since)
    if until is not None:
        query = query.where(Event.ts < until)
    if cursor:
        cursor_ts, _, cursor_id = cursor.partition(":")
        if not cursor_ts.isdigit() or not cursor_id:
            raise ApiError(
                422,
                "cursor: not a cursor from a previous page",
                details=[FieldError("cursor", "not a cursor from a previous page")],
            )
        query = query.where(
            (Event.ts < int(cursor_ts))
            | ((Event.ts == int(cursor_ts)) & (Event.event_id < cursor_id))
        )
    rows = list(
        await scope.session.scalars(
            query.order_by(Event.ts.desc(), Event.event_id.desc()).limit(limit + 1)
        )
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return s.EventPage(
        events=[_event_out(r) for r in rows],
        next_cursor=f"{rows[-1].ts}:{rows[-1].event_id}" if more and rows else None,
    )


async def stats(scope: Scope, *, since: int | None, until: int | None) -> s.EventStats:
    query = select(
        Event.event,
        func.count(),
        func.count(func.distinct(Event.unit)),
        func.min(Event.ts),
        func.max(Event.ts),
    ).where(Event.project_id == scope.project_id)
    if since is not None:
        query = query.where(Event.ts >= since)
    if until is not None:
        query = query.where(Event.ts < until)
    rows = (await scope.session.execute(query.group_by(Event.event).order_by(Event.event))).all()
    items = [
        s.EventStat(event=name, count=count, units=units, first_ts=first, last_ts=last)
        for name, count, units, first, last in rows
    ]
    return s.EventStats(events=items, total=sum(i.count for i in items))
