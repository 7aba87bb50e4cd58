"""events: the one event store

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGINT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", BIGINT_PK, primary_key=True, autoincrement=True),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=True),
        sa.Column("unit", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=200), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("props", JSON_TYPE, nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_events_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sa.UniqueConstraint("project_id", "event_id", name=op.f("uq_events_project_id_event_id")),
    )
    op.create_index("ix_events_unit_ts", "events", ["project_id", "unit", "ts"])
    op.create_index("ix_events_ts", "events", ["project_id", "ts", "id"])


def downgrade() -> None:
    op.drop_table("events")
