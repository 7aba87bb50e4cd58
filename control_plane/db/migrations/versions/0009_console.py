"""the console: signed-in sessions, and environments marked critical

- ``console_sessions``: one row per signed-in browser, keyed by the SHA-256 of its cookie (the
  cookie's value is never stored), bound to the management key that signed in; deleted on sign-out
  and ignored once idle for too long or once the key is revoked.
- ``environments.critical``: turning a flag on or off there asks for confirmation in the console
  (``production`` is critical by default).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column(
            "key_id",
            sa.String(length=40),
            sa.ForeignKey("api_keys.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_key_id", "console_sessions", ["key_id"])
    op.add_column(
        "environments",
        sa.Column("critical", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.execute("UPDATE environments SET critical = TRUE WHERE key = 'production'")


def downgrade() -> None:
    with op.batch_alter_table("environments") as batch:
        batch.drop_column("critical")
    op.drop_index("ix_console_sessions_key_id", "console_sessions")
    op.drop_table("console_sessions")
