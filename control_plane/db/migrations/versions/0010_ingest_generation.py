"""the ingest generation: a number that moves on after every committed write of events or exposures

Experiment results are cached by it (a repeat view while no event arrived reads no event). On
PostgreSQL it is the sequence ``ingest_generation_seq`` (``nextval`` after each ingest commits: no
row lock shared by concurrent ingests, nothing rolled back); on SQLite, which has one writer at a
time, the single row of ``ingest_generation``.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "ingest_generation",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "value": 0}])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SEQUENCE ingest_generation_seq")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SEQUENCE ingest_generation_seq")
    op.drop_table("ingest_generation")
