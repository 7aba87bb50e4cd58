"""layers and holdouts: experiments of a layer share its units without overlapping (an
experiment's traffic and the range of the layer's buckets it holds), and holdouts keep a share of
units out of every experiment of the project or of a layer

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "layers",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_layers_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_layers")),
        sa.UniqueConstraint("project_id", "key", name=op.f("uq_layers_project_id_key")),
    )
    op.create_table(
        "holdouts",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("share", sa.Integer(), nullable=False),
        sa.Column("layer_id", sa.String(length=40), nullable=True),
        sa.Column("metric_ids", JSON_TYPE, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_holdouts_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["layer_id"],
            ["layers.id"],
            name=op.f("fk_holdouts_layer_id_layers"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_holdouts")),
        sa.UniqueConstraint("project_id", "key", name=op.f("uq_holdouts_project_id_key")),
    )
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("layer_id", sa.String(length=40), nullable=True))
        batch.add_column(
            sa.Column("traffic", sa.Integer(), nullable=False, server_default="100000")
        )
        batch.add_column(sa.Column("range_start", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("range_end", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_experiments_layer_id_layers"),
            "layers",
            ["layer_id"],
            ["id"],
            ondelete="RESTRICT",
        )


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_constraint(op.f("fk_experiments_layer_id_layers"), type_="foreignkey")
        batch.drop_column("range_end")
        batch.drop_column("range_start")
        batch.drop_column("traffic")
        batch.drop_column("layer_id")
    op.drop_table("holdouts")
    op.drop_table("layers")
