"""metric capping settings; sequential looks keep the intersection of their confidence sequences

- ``metrics.capping`` (``absolute`` | ``percentile`` | null) and ``metrics.capping_value``;
- ``sequential_looks.ci_low``/``ci_high`` (relative, percent) and ``difference_low``/``_high``:
  the running intersection of the confidence sequences over looks (null: unbounded).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_BOUNDS = ("ci_low", "ci_high", "difference_low", "difference_high")


def upgrade() -> None:
    op.add_column("metrics", sa.Column("capping", sa.String(length=16), nullable=True))
    op.add_column("metrics", sa.Column("capping_value", sa.Float(), nullable=True))
    for name in _BOUNDS:
        op.add_column("sequential_looks", sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sequential_looks") as batch:
        for name in _BOUNDS:
            batch.drop_column(name)
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("capping_value")
        batch.drop_column("capping")
