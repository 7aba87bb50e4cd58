"""Schema migrations with Alembic, on SQLite (batch mode) and PostgreSQL alike."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from control_plane.db.engine import make_sync_engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


logging.getLogger("alembic").setLevel(logging.WARNING)


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(database_url: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate to ``revision``; returns (revision before, revision after)."""
    engine = make_sync_engine(database_url)
    config = _config()
    try:
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
