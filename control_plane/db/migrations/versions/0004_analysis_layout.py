"""events and exposures laid out for fast ingest and analysis

- ``events`` keyed by ``(project_id, event_id)``: no surrogate ``id``, every event has an
  ``eventId`` (older rows without one get ``cp-legacy-<id>``), no ``(project_id, unit, ts)``
  index (unit lookups go through the analysis index), ``ix_events_ts`` on ``(project_id, ts)``;
- no foreign key from ``events`` / ``exposures`` to ``projects`` (a per-row check at ingest);
- on PostgreSQL, ``COLLATE "C"`` on the key columns, the analysis index of ``events`` covering
  ``value``, and the key of ``exposures`` covering ``arm`` and ``exposed_at`` (its per-arm index
  goes: counts per arm read the key).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_EVENT_KEYS = {"project_id": 40, "event_id": 200, "unit": 200, "event": 200}
_EXPOSURE_KEYS = {"project_id": 40, "kind": 16, "subject": 128, "unit": 200, "arm": 128}


def _collate(table: str, columns: dict[str, int], collation: str | None) -> None:
    for name, length in columns.items():
        op.alter_column(table, name, type_=sa.String(length, collation=collation))


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("UPDATE events SET event_id = 'cp-legacy-' || id WHERE event_id IS NULL")
    op.drop_index("ix_events_unit_ts", table_name="events")
    op.drop_index("ix_events_ts", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint("fk_events_project_id_projects", type_="foreignkey")
        batch.drop_constraint("uq_events_project_id_event_id", type_="unique")
        batch.drop_constraint("pk_events", type_="primary")
        batch.drop_column("id")
        batch.alter_column("event_id", existing_type=sa.String(200), nullable=False)
        batch.create_primary_key("pk_events", ["project_id", "event_id"])
    op.create_index("ix_events_ts", "events", ["project_id", "ts"])
    with op.batch_alter_table("exposures") as batch:
        batch.drop_constraint("fk_exposures_project_id_projects", type_="foreignkey")
    op.drop_index("ix_exposures_arm", table_name="exposures")
    op.drop_index("ix_events_analysis", table_name="events")
    if postgres:
        _collate("events", _EVENT_KEYS, "C")
        _collate("exposures", _EXPOSURE_KEYS, "C")
        op.execute(
            "ALTER TABLE exposures DROP CONSTRAINT pk_exposures, ADD CONSTRAINT pk_exposures "
            "PRIMARY KEY (project_id, kind, subject, unit) INCLUDE (arm, exposed_at)"
        )
    op.create_index(
        "ix_events_analysis",
        "events",
        ["project_id", "event", "unit", "ts"],
        postgresql_include=["value"],
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.drop_index("ix_events_analysis", table_name="events")
    if postgres:
        op.drop_constraint("pk_exposures", "exposures", type_="primary")
        op.create_primary_key(
            "pk_exposures", "exposures", ["project_id", "kind", "subject", "unit"]
        )
        _collate("events", _EVENT_KEYS, None)
        _collate("exposures", _EXPOSURE_KEYS, None)
    op.create_index("ix_events_analysis", "events", ["project_id", "event", "unit", "ts"])
    op.create_index("ix_exposures_arm", "exposures", ["project_id", "kind", "subject", "arm"])
    for table in ("events", "exposures"):
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_project_id_projects",
                "projects",
                ["project_id"],
                ["id"],
                ondelete="CASCADE",
            )
    # the ids given to events sent without one stay: they are real eventIds now
    op.drop_index("ix_events_ts", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint("pk_events", type_="primary")
        batch.add_column(sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite")))
    if postgres:
        op.execute("CREATE SEQUENCE events_id_seq OWNED BY events.id")
        op.execute("UPDATE events SET id = nextval('events_id_seq')")
        op.execute("ALTER TABLE events ALTER COLUMN id SET DEFAULT nextval('events_id_seq')")
    else:
        op.execute("UPDATE events SET id = rowid")
    with op.batch_alter_table("events") as batch:
        batch.alter_column("event_id", existing_type=sa.String(200), nullable=True)
        batch.alter_column("id", existing_type=sa.BigInteger(), nullable=False)
        batch.create_primary_key("pk_events", ["id"])
        batch.create_unique_constraint("uq_events_project_id_event_id", ["project_id", "event_id"])
    op.create_index("ix_events_unit_ts", "events", ["project_id", "unit", "ts"])
    op.create_index("ix_events_ts", "events", ["project_id", "ts", "id"])
