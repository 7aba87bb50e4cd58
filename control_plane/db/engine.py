"""Database URLs as users write them, turned into engines with the drivers Vane ships.

On SQLite every transaction starts with ``BEGIN IMMEDIATE``: it takes the file's one write lock at
once, so a transaction that reads and then writes can never be refused at its first write (a
deferred transaction whose snapshot another writer moved past gets "database is locked" however
long the busy timeout). That leaves the waiting. SQLite's busy handler polls, does not serve
waiters in order and gives up when the busy timeout runs out: with eight clients writing at once
through one process, a writer could lose the lock for seconds on end and answer 503 ("database
is locked"), and the webhook dispatcher's record of a delivery could fail the same way (#35).
So the connections of one process to one SQLite file also take turns in-process (:class:`_Turn`):
a transaction first waits for the process's turn, in the order asked (up to
:data:`TURN_TIMEOUT_S`), and only then begins; in-process writers never wait on SQLite, and the
busy timeout only covers other processes (``vane`` commands, more than one worker). Every user of an engine made
here (requests, the schedule and change-request runners, the webhook outbox and dispatcher,
results) goes through it. PostgreSQL is untouched: its writers wait on row and advisory locks.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, create_engine, make_url
from sqlalchemy.exc import TimeoutError as SQLAlchemyTimeoutError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry
from sqlalchemy.util import await_only

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg"}
_SYNC_DRIVERS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"}


def _normalise(url: str, drivers: dict[str, str]) -> URL:
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    backend = parsed.get_backend_name()
    if backend not in drivers:
        raise ValueError(f"unsupported database {backend!r}: use sqlite:/// or postgresql://")
    return parsed.set(drivername=drivers[backend])


def async_url(url: str) -> URL:
    return _normalise(url, _ASYNC_DRIVERS)


def sync_url(url: str) -> URL:
    return _normalise(url, _SYNC_DRIVERS)


BUSY_TIMEOUT_S = 10.0
"""How long SQLite waits for another process's write to end (the URL's ``?timeout=`` overrides)."""


def busy_timeout_ms(url: URL) -> int:
    """The busy timeout of a SQLite URL: its ``timeout`` (seconds, as the sqlite3 driver reads
    it), else :data:`BUSY_TIMEOUT_S`."""
    value = url.query.get("timeout")
    seconds = float(value if isinstance(value, str) else BUSY_TIMEOUT_S)
    return max(0, round(seconds * 1000))


TURN_TIMEOUT_S = 30.0
"""The longest a transaction waits for its turn, as long as a pooled connection is waited for
(then ``sqlalchemy.exc.TimeoutError``: a 503 with ``Retry-After``, as when no pooled connection
comes free)."""


class _LoopTurn:
    """The turn of one event loop's connections: a FIFO lock and the task holding it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.owner: asyncio.Task[Any] | None = None

    async def take(self) -> None:
        task = asyncio.current_task()
        if task is not None and task is self.owner:
            # It would wait for itself: SQLite would have refused it after the busy timeout.
            raise RuntimeError("a second SQLite transaction in a task whose first is still open")
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                await self.lock.acquire()
        except TimeoutError:
            raise SQLAlchemyTimeoutError(
                f"no turn on the SQLite database within {TURN_TIMEOUT_S:g} s"
            ) from None
        self.owner = task

    def give_back(self) -> None:
        self.owner = None
        self.lock.release()


class _Turn:
    """One transaction at a time among a process's connections to one SQLite file (see the
    module's docstring), held from ``BEGIN`` until the connection returns to the pool (after
    its commit or rollback has completed) or is invalidated. An asyncio lock belongs to one
    event loop, so each loop has its own (loops in different threads fall back on SQLite's
    busy timeout between them)."""

    _KEY = "vane_sqlite_turn"

    def __init__(self) -> None:
        self._loops: dict[asyncio.AbstractEventLoop, _LoopTurn] = {}
        self._guard = threading.Lock()

    def _of(self, loop: asyncio.AbstractEventLoop) -> _LoopTurn:
        with self._guard:
            for closed in [other for other in self._loops if other.is_closed()]:
                del self._loops[closed]
            return self._loops.setdefault(loop, _LoopTurn())

    def take(self, record_info: dict[Any, Any]) -> None:
        """Wait for the turn (inside SQLAlchemy's greenlet, so a sync event may await)."""
        if self._KEY in record_info:  # this connection already has it (a later transaction)
            return
        loop = asyncio.get_running_loop()
        turn = self._of(loop)
        await_only(turn.take())
        record_info[self._KEY] = (loop, turn)

    def give_back(self, record_info: dict[Any, Any] | None) -> None:
        held: tuple[asyncio.AbstractEventLoop, _LoopTurn] | None = (
            None if record_info is None else record_info.pop(self._KEY, None)
        )
        if held is None:
            return
        loop, turn = held
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            turn.give_back()
        elif not loop.is_closed():  # a connection the garbage collector returned elsewhere
            loop.call_soon_threadsafe(turn.give_back)


_TURNS: weakref.WeakValueDictionary[str, _Turn] = weakref.WeakValueDictionary()
_TURNS_GUARD = threading.Lock()


def _turn_of(database: str) -> _Turn:
    """The turn of a SQLite file, shared by every engine of this process on it (kept while one
    of them is)."""
    path = str(Path(database).expanduser().resolve())
    with _TURNS_GUARD:
        turn = _TURNS.get(path)
        if turn is None:
            turn = _TURNS[path] = _Turn()
        return turn


def _configure_sqlite(sync_engine: Engine, busy_ms: int, turn: _Turn | None) -> None:
    """WAL, foreign keys, ``BEGIN IMMEDIATE`` and, on an async engine, the process's
    :class:`_Turn` before it (see the module's docstring)."""

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        if turn is None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
            return
        held = connection.connection.record_info
        turn.take(held)
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            turn.give_back(held)
            raise

    if turn is None:
        return

    @event.listens_for(sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        turn.give_back(record.record_info)

    @event.listens_for(sync_engine, "invalidate")
    def _on_invalidate(_dbapi_connection: Any, record: ConnectionPoolEntry, _exc: Any) -> None:
        turn.give_back(record.record_info)


def _ensure_sqlite_dir(url: URL) -> None:
    if url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def make_async_engine(url: str) -> AsyncEngine:
    target = async_url(url)
    if target.get_backend_name() == "sqlite":
        _ensure_sqlite_dir(target)
        engine = create_async_engine(target)
        turn = _turn_of(target.database) if target.database not in (None, "", ":memory:") else None
        _configure_sqlite(engine.sync_engine, busy_timeout_ms(target), turn)
        return engine
    return create_async_engine(target, pool_size=10, max_overflow=10, pool_pre_ping=True)


def make_sync_engine(url: str) -> Engine:
    target = sync_url(url)
    if target.get_backend_name() == "sqlite":
        _ensure_sqlite_dir(target)
        engine = create_engine(target)
        _configure_sqlite(engine, busy_timeout_ms(target), None)  # migrations: one at a time
        return engine
    return create_engine(target, pool_pre_ping=True)
