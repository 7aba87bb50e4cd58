"""Schema migrations with Alembic, on SQLite (batch mode) and PostgreSQL alike."""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from control_plane.db.engine import make_sync_engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


logging.getLogger("alembic").setLevel(logging.WARNING)


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


@cache
def _head() -> str | None:
    """The newest revision of the migrations shipped (read once: loading them is most of an
    upgrade that finds nothing to do)."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def upgrade(database_url: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate to ``revision``; returns (revision before, revision after). A database already at
    the head is left alone without loading the migrations (every start of a control plane)."""
    engine = make_sync_engine(database_url)
    config = _config()
    try:
        if revision == "head":
            with engine.connect() as connection:
                current = MigrationContext.configure(connection).get_current_revision()
            if current is not None and current == _head():
                return current, current
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Replicas starting together migrate one at a time.
                connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7461626)")
            before = MigrationContext.configure(connection).get_current_revision()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            after = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    return before, after


def autogenerate(database_url: str, message: str) -> None:
    """Developer helper: write a new revision from the models' difference to ``database_url``."""
    engine = make_sync_engine(database_url)
    config = _config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.revision(config, message=message, autogenerate=True)
    finally:
        engine.dispose()
