"""segments list keys of other context kinds: ``segments.included_contexts`` and
``segments.excluded_contexts`` (``[{contextKind, values}]``, as LaunchDarkly's segments have
them); a segment made before has none

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("segments") as batch:
        batch.add_column(
            sa.Column("included_contexts", JSON_TYPE, nullable=False, server_default="[]")
        )
        batch.add_column(
            sa.Column("excluded_contexts", JSON_TYPE, nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("segments") as batch:
        batch.drop_column("excluded_contexts")
        batch.drop_column("included_contexts")
