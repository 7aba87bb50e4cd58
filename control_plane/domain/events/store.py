"""Writing event batches fast, with the database deciding what is a duplicate.

PostgreSQL: one ``INSERT INTO events … SELECT * FROM unnest(<one array per column>)
ON CONFLICT (project_id, event_id) DO NOTHING``; SQLite: one ``executemany`` of
``INSERT … ON CONFLICT DO NOTHING``. Both run on the request's own connection, inside its
transaction, and report how many rows were new. (Building a 500-row ``VALUES`` statement through
SQLAlchemy's compiler instead costs ~160 ms per batch.) The batch is kept column by column, the
shape the PostgreSQL statement takes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from shared.wire.events import EventIn

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
_PG_UNNEST = (
    f"INSERT INTO events ({_COLUMN_LIST}) "
    "SELECT * FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[], %s::varchar[], "
    "%s::bigint[], %s::varchar[], %s::jsonb[], %s::text[], %s::bigint[], %s::bigint[], "
    "%s::varchar[]) ON CONFLICT (project_id, event_id) DO NOTHING"
)
_SQLITE_INSERT = (
    f"INSERT INTO events ({_COLUMN_LIST}) VALUES ({', '.join('?' for _ in COLUMNS)}) "
    "ON CONFLICT (project_id, event_id) DO NOTHING"
)
_json = msgspec.json.Encoder()


@dataclass(slots=True)
class EventColumns:
    """A batch of events as one list per column of ``events``."""

    project_id: list[str]
    event_id: list[str | None]
    unit: list[str]
    event: list[str]
    value: list[int | None]
    currency: list[str | None]
    props: list[str | None]  # JSON text
    url: list[str | None]
    ts: list[int]
    received_at: list[int]
    source: list[str]

    @classmethod
    def of(
        cls, items: Sequence[EventIn], *, project_id: str, received_at: int, sources: Sequence[str]
    ) -> EventColumns:
        encode = _json.encode
        return cls(
            project_id=[project_id] * len(items),
            event_id=[i.event_id for i in items],
            unit=[i.unit for i in items],
            event=[i.event for i in items],
            value=[None if i.value is None else int(i.value) for i in items],
            currency=[i.currency for i in items],
            props=[None if i.props is None else encode(i.props).decode() for i in items],
            url=[i.url for i in items],
            ts=[received_at if i.ts is None else i.ts for i in items],
            received_at=[received_at] * len(items),
            source=list(sources),
        )

    def arrays(self) -> list[list[Any]]:
        return [getattr(self, name) for name in COLUMNS]

    def rows(self) -> list[tuple[Any, ...]]:
        return list(zip(*self.arrays(), strict=True))

    def rows_named(self, names: Collection[str]) -> list[dict[str, Any]]:
        """The events whose name is in ``names``, as dicts (``props`` decoded)."""
        return [
            {
                "event": self.event[i],
                "unit": self.unit[i],
                "ts": self.ts[i],
                "props": _props(self.props[i]),
            }
            for i, name in enumerate(self.event)
            if name in names
        ]


def _props(text: str | None) -> Any:
    return None if text is None else msgspec.json.decode(text)


async def insert_events(session: AsyncSession, batch: EventColumns) -> int:
    """Insert ``batch``; returns how many events were not duplicates."""
    connection = await session.connection()
    raw = await connection.get_raw_connection()
    driver: Any = raw.driver_connection
    if connection.dialect.name == "postgresql":
        async with driver.cursor() as cursor:
            await cursor.execute(_PG_UNNEST, batch.arrays())
            return int(cursor.rowcount)
    cursor = await driver.executemany(_SQLITE_INSERT, batch.rows())
    try:
        return int(cursor.rowcount)
    finally:
        await cursor.close()
