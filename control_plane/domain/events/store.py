"""Writing event batches fast, with the database deciding what is a duplicate.

An event that came without an ``eventId`` is given one here (as relays do at spool time), so
every stored event has one and ``(project_id, event_id)`` is the table's key.

PostgreSQL: the batch travels as one JSON document, re-encoded by msgspec from the checked
events, and PostgreSQL unpacks it: ``INSERT INTO events … SELECT … FROM json_to_recordset(…)
ON CONFLICT (project_id, event_id) DO NOTHING``. One parameter instead of an array per column
keeps the control plane's share small (psycopg adapting eleven 500-element arrays cost ~10 µs per
event; encoding the JSON ~1 µs). SQLite: one ``executemany`` of ``INSERT … ON CONFLICT DO
NOTHING``. Both run on the request's own connection, inside its transaction, and report how many
rows were new.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import Event
from shared.wire.events import EventIds, EventIn

COLUMNS = (
    "project_id",
    "event_id",
    "unit",
    "event",
    "value",
    "currency",
    "props",
    "url",
    "ts",
    "received_at",
    "source",
)
_COLUMN_LIST = ", ".join(COLUMNS)
# Field names are EventIn's wire names; a missing ``ts`` is the time of receipt, a missing
# ``source`` the one the key implies.
_PG_INSERT = (
    f"INSERT INTO events ({_COLUMN_LIST}) "
    'SELECT %(project)s, x."eventId", x.unit, x.event, x.value, x.currency, x.props, x.url, '
    "coalesce(x.ts, %(now)s), %(now)s, coalesce(x.source, %(source)s) "
    'FROM json_to_recordset(%(batch)s::json) AS x("eventId" text, unit text, event text, '
    "value bigint, currency text, props jsonb, url text, ts bigint, source text) "
    "ON CONFLICT (project_id, event_id) DO NOTHING"
)
_SQLITE_INSERT = (
    f"INSERT INTO events ({_COLUMN_LIST}) VALUES ({', '.join('?' for _ in COLUMNS)}) "
    "ON CONFLICT (project_id, event_id) DO NOTHING"
)
_json = msgspec.json.Encoder()


_ids = EventIds("cp")


def _complete(items: Sequence[EventIn]) -> Sequence[EventIn]:
    """Every item with an ``eventId`` (a new one where it came without), and a ``value`` sent
    as a whole float (``4999.0``, accepted) as an int. Untouched items are not copied."""
    if all(item.event_id is not None and type(item.value) is not float for item in items):
        return items
    return [
        item
        if item.event_id is not None and type(item.value) is not float
        else msgspec.structs.replace(
            item,
            event_id=item.event_id if item.event_id is not None else _ids.next(),
            value=int(item.value) if type(item.value) is float else item.value,
        )
        for item in items
    ]


async def insert_events(
    session: AsyncSession,
    items: Sequence[EventIn],
    *,
    project_id: str,
    received_at: int,
    source: str,
) -> int:
    """Insert checked ``items``; returns how many were not duplicates. ``source`` is used for
    items that do not name their own (only relays' do)."""
    items = _complete(items)
    connection = await session.connection()
    raw = await connection.get_raw_connection()
    driver: Any = raw.driver_connection
    if connection.dialect.name == "postgresql":
        parameters = {
            "project": project_id,
            "now": received_at,
            "source": source,
            "batch": _json.encode(items).decode(),
        }
        async with driver.cursor() as cursor:
            await cursor.execute(_PG_INSERT, parameters)
            return int(cursor.rowcount)
    encode = _json.encode
    rows = [
        (
            project_id,
            i.event_id,
            i.unit,
            i.event,
            i.value,
            i.currency,
            None if i.props is None else encode(i.props).decode(),
            i.url,
            received_at if i.ts is None else i.ts,
            received_at,
            i.source or source,
        )
        for i in items
    ]
    cursor = await driver.executemany(_SQLITE_INSERT, rows)
    try:
        return int(cursor.rowcount)
    finally:
        await cursor.close()


async def count_conflicts(session: AsyncSession, project_id: str, items: Sequence[EventIn]) -> int:
    """How many of ``items`` repeat a stored ``eventId`` with a different payload (unit, event,
    value, currency, props, url, and ``ts`` where the sender gave one). Called only when the
    insert reported duplicates; the first copy stays stored either way."""
    ids = {item.event_id for item in items if item.event_id is not None}
    if not ids:
        return 0
    rows = await session.execute(
        select(
            Event.event_id,
            Event.unit,
            Event.event,
            Event.value,
            Event.currency,
            Event.props,
            Event.url,
            Event.ts,
        ).where(Event.project_id == project_id, Event.event_id.in_(ids))
    )
    stored = {row.event_id: row for row in rows}
    conflicts = 0
    for item in items:
        row = stored.get(item.event_id) if item.event_id is not None else None
        if row is None:
            continue
        value = None if item.value is None else int(item.value)
        same = (row.unit, row.event, row.value, row.currency, row.props, row.url) == (
            item.unit,
            item.event,
            value,
            item.currency,
            item.props,
            item.url,
        ) and (item.ts is None or item.ts == row.ts)
        conflicts += not same
    return conflicts
