"""The ingest generation: a number that moves on after every committed write of events or
exposures, so that what is computed from them can be cached by it (migration 0010).

It moves on *after* the write commits. A reader that reads the generation and then computes has
either seen the write (its commit came first) or will find the generation moved on at its next
read (the write's ``advance`` comes after its commit, so after the reader's snapshot): a cached
result is never kept past a write it did not see. PostgreSQL uses a sequence, which concurrent
ingests advance without waiting for each other and which no rollback moves back; SQLite, one
writer at a time, a single row. Anything that writes events or exposures other than through the
services (an import, a script) runs :func:`advance_statement` after it commits, or results keep
what they had computed.
"""

from __future__ import annotations

from sqlalchemy import Executable, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from control_plane.db.models import IngestGeneration

_LAST = text("SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM ingest_generation_seq")


def _postgres(session: AsyncSession) -> bool:
    return session.bind is not None and session.bind.dialect.name == "postgresql"


def advance_statement(dialect: str) -> Executable:
    """The statement that moves the generation on, for a database of ``dialect``."""
    if dialect == "postgresql":
        return text("SELECT nextval('ingest_generation_seq')")
    return (
        update(IngestGeneration)
        .where(IngestGeneration.id == 1)
        .values(value=IngestGeneration.value + 1)
    )


async def advance(session: AsyncSession) -> None:
    """Move the generation on, in a transaction of its own (call it after the write commits)."""
    await session.execute(advance_statement("postgresql" if _postgres(session) else "sqlite"))
    await session.commit()


async def current(session: AsyncSession) -> int:
    """The generation now (read before computing what is cached under it)."""
    if _postgres(session):
        return int(await session.scalar(_LAST) or 0)
    return int(
        await session.scalar(select(IngestGeneration.value).where(IngestGeneration.id == 1)) or 0
    )
