"""Alembic environment: runs on the connection handed in by ``control_plane.db.migrate``."""

from __future__ import annotations

from alembic import context

from control_plane.db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `vane db upgrade` (control_plane.db.migrate)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
