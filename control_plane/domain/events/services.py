"""Event ingest and inspection.

Exactly once: the insert is ``INSERT … ON CONFLICT (project_id, event_id) DO NOTHING`` in one
statement per batch, on PostgreSQL and SQLite alike, so a repeat — in
the same batch, a later one, or a concurrent request on another replica — is never stored
twice; whatever the database skipped is reported as a duplicate, and those whose payload
differs from the stored copy as conflicts (compared in the database, ``store.insert_events``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from sqlalchemy import func, select, text

from control_plane.access import Permission
from control_plane.auth import KeyKind
from control_plane.db.models import Event
from control_plane.domain import exposures
from control_plane.domain.common import Scope
from control_plane.domain.events import schemas as s
from control_plane.domain.events.store import insert_events
from control_plane.domain.paging import CursorFormat, Position, paged
from control_plane.domain.rows import private_attributes
from control_plane.errors import FieldError, invalid, invalid_many
from shared.engine.experiments import without_private
from shared.wire import events
from shared.wire.kinds import qualified_unit, redact

logger = logging.getLogger("vane.events")

_SENDERS: dict[KeyKind, events.Source] = {
    KeyKind.SERVER: "server",
    KeyKind.MANAGEMENT: "management",
    KeyKind.RELAY: "relay",
}


def _refuse(problems: list[events.Problem]) -> None:
    if problems:
        raise invalid_many([FieldError(field, message) for field, message in problems])


def parse_one(item: s.EventIn, now: int) -> s.EventIn:
    _refuse(events.check_event(item, now))
    return item


async def ingest(
    scope: Scope, kind: KeyKind, items: Sequence[s.EventIn], now: int, *, batch: bool = True
) -> s.Ack:
    """Store checked ``items`` sent with a key of ``kind``, once each.

    Trust follows the sender. A server or management key may not use a ``$`` name other than the
    exposures, nor the browsers' id namespace, and its exposures must name a running experiment
    and the unit's own variant (else 422, nothing stored). A relay forwards what it already
    refused or checked: browser events (ids moved into their namespace), server events, and the
    exposures it established itself (trusted, at the relay's clock). Forwarded items that no
    longer pass (an experiment stopped in between) are left out rather than refused, so that a
    relay's spool never stalls on them.
    """
    scope.require(Permission.EDIT)  # a viewer's token sends none; server and relay keys may
    if not items:
        return s.Ack(accepted=0, duplicates=0)

    def _field(index: int) -> str:
        return events.item_prefix(index) if batch else ""

    sender = _SENDERS.get(kind, "server")
    forwarded = kind is KeyKind.RELAY
    if not forwarded:
        _refuse(
            [
                problem
                for index, item in enumerate(items)
                if events.sender_problems(item, sender)  # named with its index only if refused
                for problem in events.sender_problems(item, sender, _field(index))
            ]
        )
    private = () if forwarded else private_attributes(scope)
    items = [_stored(item, private) for item in items]
    checks = await exposures.Claims.load(scope.session, scope.project_id, items)
    kept: list[s.EventIn] = []
    problems: list[events.Problem] = []
    found: list[exposures.FirstExposure] = []
    for index, item in enumerate(items):
        source = (item.source or "relay") if forwarded else sender
        if source == "browser":
            if item.event.startswith(events.RESERVED_PREFIX):
                continue
            item = msgspec.structs.replace(item, event_id=browser_id(item.event_id))
        elif item.event in events.EXPOSURE_EVENTS:
            exposure, problem = checks.check(item, now, trusted=source == "relay")
            if problem is not None:
                if forwarded:
                    logger.info("forwarded exposure left out: %s", problem[1])
                    continue
                problems.append((_field(index) + problem[0], problem[1]))
                continue
            if exposure is not None:
                found.append(exposure)
        kept.append(item)
    _refuse(problems)
    if not kept:
        return s.Ack(accepted=0, duplicates=0)
    stored = await insert_events(
        scope.session, kept, project_id=scope.project_id, received_at=now, source=sender
    )
    if found and await exposures.record(scope.session, scope.project_id, found):
        scope.events_written = True
    if stored.inserted:
        scope.events_written = True
    return s.Ack(
        accepted=stored.inserted,
        duplicates=len(kept) - stored.inserted,
        conflicts=stored.conflicts,
    )


def _stored(item: s.EventIn, private: tuple[str, ...]) -> s.EventIn:
    """The event as stored: a unit of another kind than a user is ``kind:key``
    (``shared.wire.kinds``), so an organization's events join its exposures, apart from users';
    the key's private attributes are taken out of its props."""
    if private and item.props:
        props = redact(item.props, private)
        captured = (props or {}).get("dimensions")
        if item.event == events.EXPERIMENT_EXPOSURE and isinstance(captured, dict):
            kept = without_private(captured, private)
            props = {**(props or {}), "dimensions": {k: captured[k] for k in kept}}
        item = msgspec.structs.replace(item, props=props)
    if item.unit_kind is None:
        return item
    unit = qualified_unit(item.unit_kind, item.unit)
    return msgspec.structs.replace(item, unit=unit, unit_kind=None)


def browser_id(event_id: str | None) -> str | None:
    """A page's event id, moved into the browsers' namespace (see ``events.BROWSER_ID_PREFIX``)."""
    return None if event_id is None else events.BROWSER_ID_PREFIX + event_id


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


def _read_cursor(_list_name: str, cursor: str) -> Position:
    cursor_ts, _, cursor_id = cursor.partition(":")
    digits = cursor_ts.isascii() and cursor_ts.isdigit()  # isdigit alone takes "²", int does not
    if not digits or int(cursor_ts) > events.MAX_VALUE or not cursor_id:
        raise invalid("cursor", "not a cursor from a previous page")
    return int(cursor_ts), cursor_id


TS_ID = CursorFormat(
    encode=lambda _list_name, position: f"{position[0]}:{position[1]}", decode=_read_cursor
)
"""The events' cursor, as it was before the lists shared theirs: the last event's ``ts:id``."""


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

    async def convert(rows: list[Event]) -> list[s.EventOut]:
        return [_event_out(r) for r in rows]

    found = await paged(
        scope,
        query,
        (Event.ts, Event.event_id),
        list_name="events",
        limit=limit,
        cursor=cursor or None,  # an empty cursor is none
        convert=convert,
        descending=True,
        cursors=TS_ID,
    )
    return s.EventPage(events=found.items, next_cursor=found.next_cursor, has_more=found.has_more)


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
