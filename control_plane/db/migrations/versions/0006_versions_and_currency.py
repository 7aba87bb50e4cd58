"""versions for metrics and environments (ETag / If-Match); a metric's currency

- ``metrics.version`` and ``environments.version``: bumped by every edit, answered as ``ETag``;
- ``metrics.currency``: ``sum`` and ``mean`` metrics that name one read only events in it;
- ``experiments.description``: editable with the rest of an experiment.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("metrics", sa.Column("currency", sa.String(length=3), nullable=True))
    op.add_column("metrics", sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    op.add_column(
        "environments", sa.Column("version", sa.Integer(), nullable=False, server_default="1")
    )
    op.add_column(
        "experiments", sa.Column("description", sa.Text(), nullable=False, server_default="")
    )


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("description")
    with op.batch_alter_table("environments") as batch:
        batch.drop_column("version")
    with op.batch_alter_table("metrics") as batch:
        batch.drop_column("version")
        batch.drop_column("currency")
