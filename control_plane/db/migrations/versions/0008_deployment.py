"""the deployment's own id, shared by every replica through the database

A Redis shared by two deployments must not carry one's changes to the other: replicas name their
pub/sub channel after this id (``vane:<id>:changes``), which every replica of one deployment
reads from the database they share.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "deployment",
        sa.Column("id", sa.String(length=40), primary_key=True),
    )
    op.bulk_insert(table, [{"id": "dep_" + secrets.token_hex(8)}])


def downgrade() -> None:
    op.drop_table("deployment")
