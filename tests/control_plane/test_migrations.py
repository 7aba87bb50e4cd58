"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL; the
rows made before they are written have the models' columns."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from control_plane.db import migrate
from control_plane.db.engine import sync_url
from control_plane.db.models import Base, Flag, FlagSetting, NewFlag, NewSetting


def _head() -> str | None:
    config = Config()
    config.set_main_option("script_location", str(migrate.MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config).get_current_head()


def test_migrations_match_models(database_url: str) -> None:
    _, after = migrate.upgrade(database_url)
    assert after == _head()
    engine = create_engine(sync_url(database_url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            assert context.get_current_revision() == _head()
    finally:
        engine.dispose()


def test_a_new_rows_fields_are_its_tables_columns() -> None:
    """``NewFlag`` and ``NewSetting`` (rows made and not yet written, ``insert_values``) carry
    exactly their table's columns: a column added to the table and not to them would be left
    to its default by every flag a document creates."""
    for new, table in ((NewFlag, Flag), (NewSetting, FlagSetting)):
        assert set(new.__slots__) == {c.key for c in table.__mapper__.column_attrs}, new
