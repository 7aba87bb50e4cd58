"""Database URLs as users write them, turned into engines with the drivers Vane ships."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

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


def _configure_sqlite(sync_engine: Engine) -> None:
    """WAL, foreign keys, and BEGIN IMMEDIATE so two writers queue instead of deadlocking."""

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _ensure_sqlite_dir(url: URL) -> None:
    from pathlib import Path

    if url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def make_async_engine(url: str) -> AsyncEngine:
    target = async_url(url)
    if target.get_backend_name() == "sqlite":
        _ensure_sqlite_dir(target)
        engine = create_async_engine(target)
        _configure_sqlite(engine.sync_engine)
        return engine
    return create_async_engine(target, pool_size=10, max_overflow=10, pool_pre_ping=True)


def make_sync_engine(url: str) -> Engine:
    target = sync_url(url)
    if target.get_backend_name() == "sqlite":
        _ensure_sqlite_dir(target)
        engine = create_engine(target)
        _configure_sqlite(engine)
        return engine
    return create_engine(target, pool_pre_ping=True)
