"""The connections of one process to a SQLite file take turns in-process (#35): many writers at
once never wait on SQLite's busy timeout (which is not served in order and gives up), a task
that opens a second transaction while its first is open is refused at once instead of waiting
for itself, and the URL's ``?timeout=`` sets the busy timeout left for other processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from control_plane.db.engine import make_async_engine

WRITERS = 8
EACH = 40


async def _table(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.execute(text("CREATE TABLE t (writer INTEGER, n INTEGER)"))


def test_eight_writers_of_one_process_never_wait_on_the_busy_timeout(tmp_path: Path) -> None:
    async def run() -> list[tuple[int, int]]:
        # 20 ms of busy timeout: any wait on SQLite between them would be "database is locked"
        engine = make_async_engine(f"sqlite:///{tmp_path / 'turns.db'}?timeout=0.02")
        try:
            await _table(engine)
            sessions = async_sessionmaker(engine)

            async def writer(w: int) -> None:
                for n in range(EACH):
                    async with sessions() as session, session.begin():
                        await session.execute(
                            text("INSERT INTO t VALUES (:w, :n)"), {"w": w, "n": n}
                        )
                        await asyncio.sleep(0.001)  # the others queue meanwhile

            await asyncio.gather(*(writer(w) for w in range(WRITERS)))
            async with engine.connect() as connection:
                rows = await connection.execute(text("SELECT writer, n FROM t"))
                return sorted((int(w), int(n)) for w, n in rows)
        finally:
            await engine.dispose()

    assert asyncio.run(run()) == [(w, n) for w in range(WRITERS) for n in range(EACH)]


def test_a_second_transaction_in_the_same_task_is_refused_not_a_hang(tmp_path: Path) -> None:
    async def run() -> None:
        engine = make_async_engine(f"sqlite:///{tmp_path / 'turns.db'}")
        try:
            await _table(engine)
            sessions = async_sessionmaker(engine)
            async with sessions() as first, first.begin():
                await first.execute(text("INSERT INTO t VALUES (1, 1)"))
                async with sessions() as second:
                    with pytest.raises(RuntimeError, match="second SQLite transaction"):
                        async with asyncio.timeout(5):  # no task of its own, as the app's
                            await second.execute(text("SELECT 1"))
            async with sessions() as after:  # the turn was given back: the next one goes
                assert await after.scalar(text("SELECT count(*) FROM t")) == 1
        finally:
            await engine.dispose()

    asyncio.run(run())


@pytest.mark.parametrize(("query", "busy_ms"), [("", 10_000), ("?timeout=0.25", 250)])
def test_the_busy_timeout_is_the_urls_timeout_else_ten_seconds(
    tmp_path: Path, query: str, busy_ms: int
) -> None:
    async def run() -> int:
        engine = make_async_engine(f"sqlite:///{tmp_path / 'turns.db'}{query}")
        try:
            async with engine.connect() as connection:
                return int((await connection.execute(text("PRAGMA busy_timeout"))).scalar_one())
        finally:
            await engine.dispose()

    assert asyncio.run(run()) == busy_ms
