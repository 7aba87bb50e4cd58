"""results by dimension: the context attributes an experiment captures with each exposure
(``experiments.dimensions``), and the values captured (``exposure_attributes``, one row per
exposed unit and attribute, keyed in unit order like ``exposures`` so analysis merge-joins them)

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _key(length: int) -> sa.String:
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("dimensions", JSON_TYPE, nullable=False, server_default="[]"))
    op.create_table(
        "exposure_attributes",
        sa.Column("project_id", _key(40), nullable=False),
        sa.Column("kind", _key(16), nullable=False),
        sa.Column("subject", _key(128), nullable=False),
        sa.Column("name", _key(200), nullable=False),
        sa.Column("unit", _key(200), nullable=False),
        sa.Column("value", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint(
            "project_id",
            "kind",
            "subject",
            "name",
            "unit",
            name=op.f("pk_exposure_attributes"),
            postgresql_include=["value"],
        ),
    )


def downgrade() -> None:
    op.drop_table("exposure_attributes")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("dimensions")
