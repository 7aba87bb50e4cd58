"""a management key remembers who made it: ``api_keys.owner_identity`` (``Principal.identity``
of the person or key that made it; a key made by a key of someone's is theirs too), so nobody
approves their own change request with a key they mint. A key made before, or by ``vane up`` or
the CLI, has none and is its own service account.

Personal tokens keep their "may turn off" as made (``api_keys.may_turn_off``, bounded by their
person's on every use): a token made before with its person's role keeps its person's grant, as
it did; one made with a lesser role has none.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("owner_identity", sa.String(length=64), nullable=True))
    keys = sa.table(
        "api_keys",
        sa.column("user_id", sa.String),
        sa.column("project_id", sa.String),
        sa.column("role", sa.String),
        sa.column("may_turn_off", sa.Boolean),
    )
    members = sa.table(
        "memberships",
        sa.column("user_id", sa.String),
        sa.column("project_id", sa.String),
        sa.column("role", sa.String),
    )
    own_role = (
        sa.select(members.c.role)
        .where(members.c.user_id == keys.c.user_id, members.c.project_id == keys.c.project_id)
        .scalar_subquery()
    )
    op.execute(
        keys.update()
        .where(keys.c.user_id.is_not(None), keys.c.role == own_role)
        .values(may_turn_off=sa.true())
    )


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("owner_identity")
