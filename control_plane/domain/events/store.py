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

When the insert skipped some (duplicates: a relay's redelivery after a lost acknowledgement sends
a whole batch again), one more statement counts those whose payload differs from the stored copy
(conflicts), comparing in the database: the same batch joined to the rows under its ids. Nothing
is read back into Python but a count (PostgreSQL) or the few rows that differ (SQLite, where
props are compared as text and then, if they differ, decoded). A fresh batch pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

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
# Duplicates compared where they are stored: the batch again (the same JSON document), joined to
# the rows under its ids, which now include the ones this batch inserted (an id repeated within
# the batch is compared with its first copy). ``ts`` counts only where the sender gave one; props
# compare as jsonb (key order aside). Run only when the insert skipped something. A lookup by key
# per item, whatever the table's size (``LIMIT 1`` keeps the planner from a hash join over a scan).
_PG_CONFLICTS = (
    'SELECT count(*) FROM json_to_recordset(%(batch)s::json) AS x("eventId" text, unit text, '
    "event text, value bigint, currency text, props jsonb, url text, ts bigint) "
    "CROSS JOIN LATERAL (SELECT unit, event, value, currency, props, url, ts FROM events "
    'WHERE project_id = %(project)s AND event_id = x."eventId" COLLATE "C" LIMIT 1) AS e '
    "WHERE (e.unit, e.event, e.value, e.currency, e.props, e.url) IS DISTINCT FROM "
    '(x.unit COLLATE "C", x.event COLLATE "C", x.value, x.currency, x.props, x.url) '
    "OR e.ts <> x.ts"
)
# SQLite: the batch as one JSON array of ``[eventId, unit, event, value, currency, props (the
# text stored), url, ts]``; rows whose fields differ, or whose props differ as text (compared
# again decoded, as the same props may have been sent with their keys in another order).
_SQLITE_CONFLICTS = (
    "WITH x AS (SELECT json_extract(value, '$[0]') AS event_id, json_extract(value, '$[1]') AS unit,"
    " json_extract(value, '$[2]') AS event, json_extract(value, '$[3]') AS value,"
    " json_extract(value, '$[4]') AS currency, json_extract(value, '$[5]') AS props,"
    " json_extract(value, '$[6]') AS url, json_extract(value, '$[7]') AS ts FROM json_each(?))"
    " SELECT (e.unit, e.event, e.value, e.currency, e.url) IS NOT"
    " (x.unit, x.event, x.value, x.currency, x.url) OR e.ts <> coalesce(x.ts, e.ts),"
    " e.props, x.props"
    " FROM x CROSS JOIN events e"  # CROSS: the batch outside, a lookup by key per item
    " WHERE e.project_id = ? AND e.event_id = x.event_id"
    " AND ((e.unit, e.event, e.value, e.currency, e.url, e.props) IS NOT"
    " (x.unit, x.event, x.value, x.currency, x.url, x.props) OR e.ts <> coalesce(x.ts, e.ts))"
)


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


@dataclass(frozen=True, slots=True)
class Stored:
    """What became of a batch: ``inserted`` rows were new; of the rest (duplicates),
    ``conflicts`` repeat a stored ``eventId`` with another payload."""

    inserted: int
    conflicts: int


async def insert_events(
    session: AsyncSession,
    items: Sequence[EventIn],
    *,
    project_id: str,
    received_at: int,
    source: str,
) -> Stored:
    """Insert checked ``items`` and say how many were new and how many of the duplicates
    conflict. ``source`` is used for items that do not name their own (only relays' do)."""
    items = _complete(items)
    connection = await session.connection()
    raw = await connection.get_raw_connection()
    driver: Any = raw.driver_connection
    if connection.dialect.name == "postgresql":
        return await _insert_postgres(driver, items, project_id, received_at, source)
    return await _insert_sqlite(driver, items, project_id, received_at, source)


async def _insert_postgres(
    driver: Any, items: Sequence[EventIn], project_id: str, received_at: int, source: str
) -> Stored:
    parameters = {
        "project": project_id,
        "now": received_at,
        "source": source,
        "batch": _json.encode(items).decode(),
    }
    async with driver.cursor() as cursor:
        await cursor.execute(_PG_INSERT, parameters)
        inserted = int(cursor.rowcount)
        if inserted == len(items):
            return Stored(inserted, 0)
        await cursor.execute(_PG_CONFLICTS, parameters)
        row = await cursor.fetchone()
        return Stored(inserted, int(row[0]))


async def _insert_sqlite(
    driver: Any, items: Sequence[EventIn], project_id: str, received_at: int, source: str
) -> Stored:
    encode = _json.encode
    props = [None if i.props is None else encode(i.props).decode() for i in items]
    rows = [
        (
            project_id,
            i.event_id,
            i.unit,
            i.event,
            i.value,
            i.currency,
            text,
            i.url,
            received_at if i.ts is None else i.ts,
            received_at,
            i.source or source,
        )
        for i, text in zip(items, props, strict=True)
    ]
    cursor = await driver.executemany(_SQLITE_INSERT, rows)
    try:
        inserted = int(cursor.rowcount)
    finally:
        await cursor.close()
    if inserted == len(items):
        return Stored(inserted, 0)
    sent = encode(
        [
            (i.event_id, i.unit, i.event, i.value, i.currency, text, i.url, i.ts)
            for i, text in zip(items, props, strict=True)
        ]
    ).decode()
    cursor = await driver.execute(_SQLITE_CONFLICTS, (sent, project_id))
    try:
        differing = await cursor.fetchall()
    finally:
        await cursor.close()
    # props that differ as text may still be equal (keys in another order): decoded, compared
    return Stored(
        inserted,
        sum(
            bool(fields_differ) or _decode(stored) != _decode(sent_props)
            for fields_differ, stored, sent_props in differing
        ),
    )


def _decode(props: str | None) -> Any:
    return None if props is None else msgspec.json.decode(props)
