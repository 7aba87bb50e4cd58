"""ratio and quantile metrics: a ratio's numerator aggregation and its denominator (an event and
its aggregation; the numerator's event is ``event``), and a quantile metric's quantile

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.add_column(sa.Column("numerator", sa.String(16), nullable=True))
        batch.add_column(sa.Column("denominator_event", sa.String(200), nullable=True))
        batch.add_column(sa.Column("denominator", sa.String(16), nullable=True))
        batch.add_column(sa.Column("quantile", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("quantile")
        batch.drop_column("denominator")
        batch.drop_column("denominator_event")
        batch.drop_column("numerator")
