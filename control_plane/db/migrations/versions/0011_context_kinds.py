"""context kinds: an experiment's unit kind (the context kind it randomizes on, ``user`` for every
one before), and a key's private attributes (kept out of the events sent with it)

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(
            sa.Column("unit_kind", sa.String(64), nullable=False, server_default="user")
        )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("private_attributes", JSON_TYPE, nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("private_attributes")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("unit_kind")
