"""experiments, metrics, exposures, sequential looks, flag metrics

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_index("ix_events_analysis", "events", ["project_id", "event", "unit", "ts"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("event", sa.String(length=200), nullable=False),
        sa.Column("aggregation", sa.String(length=16), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_metrics_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metrics")),
        sa.UniqueConstraint("project_id", "key", name=op.f("uq_metrics_project_id_key")),
    )
    op.create_table(
        "experiments",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("selector", sa.Text(), nullable=True),
        sa.Column("goal", sa.String(length=200), nullable=False),
        sa.Column("stats_engine", sa.String(length=16), nullable=False),
        sa.Column("variants", JSON_TYPE, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("primary_metric_id", sa.String(length=40), nullable=True),
        sa.Column("guardrail_metric_ids", JSON_TYPE, nullable=False),
        sa.Column("cuped", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["primary_metric_id"],
            ["metrics.id"],
            name=op.f("fk_experiments_primary_metric_id_metrics"),
            ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_experiments_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_experiments")),
        sa.UniqueConstraint("project_id", "key", name=op.f("uq_experiments_project_id_key")),
    )
    op.create_table(
        "exposures",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("unit", sa.String(length=200), nullable=False),
        sa.Column("arm", sa.String(length=128), nullable=False),
        sa.Column("exposed_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_exposures_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", "kind", "subject", "unit", name=op.f("pk_exposures")),
    )
    op.create_index("ix_exposures_arm", "exposures", ["project_id", "kind", "subject", "arm"])
    op.create_table(
        "sequential_looks",
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("metric", sa.String(length=128), nullable=False),
        sa.Column("arm", sa.String(length=128), nullable=False),
        sa.Column("min_p_value", sa.Float(), nullable=False),
        sa.Column("looks", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("subject", "metric", "arm", name=op.f("pk_sequential_looks")),
    )
    op.create_table(
        "flag_metrics",
        sa.Column("flag_id", sa.String(length=40), nullable=False),
        sa.Column("metric_id", sa.String(length=40), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["flag_id"],
            ["flags.id"],
            name=op.f("fk_flag_metrics_flag_id_flags"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["metric_id"],
            ["metrics.id"],
            name=op.f("fk_flag_metrics_metric_id_metrics"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("flag_id", "metric_id", name=op.f("pk_flag_metrics")),
    )


def downgrade() -> None:
    op.drop_table("flag_metrics")
    op.drop_table("sequential_looks")
    op.drop_index("ix_exposures_arm", table_name="exposures")
    op.drop_table("exposures")
    op.drop_table("experiments")
    op.drop_table("metrics")
    op.drop_index("ix_events_analysis", table_name="events")
