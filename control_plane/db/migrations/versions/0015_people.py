"""people and roles: ``users`` with their ``memberships`` (a role per project), ``invitations``
(single-use links, hashed), ``sign_in_failures`` (throttling); management keys get a role and
"may turn off", personal tokens a person (``api_keys.user_id``); console sessions may belong to a
person; audit entries name the person; environments get ``required_approvals``

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sso_pending",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("pending", sa.Text(), nullable=False),
        sa.Column("next", sa.String(length=500), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sso_pending")),
    )
    with op.batch_alter_table("sso_pending", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sso_pending_created_at"), ["created_at"], unique=False)

    op.create_table(
        "sign_in_failures",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_failures")),
    )
    with op.batch_alter_table("sign_in_failures", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sign_in_failures_address"), ["address"], unique=False)
        batch_op.create_index(batch_op.f("ix_sign_in_failures_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_sign_in_failures_email"), ["email"], unique=False)

    op.create_table(
        "users",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("password_hash", sa.String(length=200), nullable=True),
        sa.Column("must_change_password", sa.Boolean(), nullable=False),
        sa.Column("sso_subject", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deactivated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
        sa.UniqueConstraint("sso_subject", name=op.f("uq_users_sso_subject")),
    )
    op.create_table(
        "invitations",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("invited_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_invitations_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_invitations_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invitations")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_invitations_token_hash")),
    )
    op.create_table(
        "memberships",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("may_turn_off", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_memberships_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_memberships_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("project_id", "user_id", name=op.f("pk_memberships")),
    )
    with op.batch_alter_table("memberships", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_memberships_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("role", sa.String(length=16), server_default="admin", nullable=False)
        )
        batch_op.add_column(
            sa.Column("may_turn_off", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("user_id", sa.String(length=40), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_keys_user_id"), ["user_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_api_keys_user_id_users"),
            "users",
            ["user_id"],
            ["id"],
            ondelete="CASCADE",
        )

    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("actor_user_id", sa.String(length=40), nullable=True))

    with op.batch_alter_table("console_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("user_id", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("project_id", sa.String(length=40), nullable=True))
        batch_op.alter_column("key_id", existing_type=sa.VARCHAR(length=40), nullable=True)
        batch_op.create_index(batch_op.f("ix_console_sessions_user_id"), ["user_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_console_sessions_project_id_projects"),
            "projects",
            ["project_id"],
            ["id"],
            ondelete="CASCADE",
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_console_sessions_user_id_users"),
            "users",
            ["user_id"],
            ["id"],
            ondelete="CASCADE",
        )

    with op.batch_alter_table("environments", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("required_approvals", sa.Integer(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("environments", schema=None) as batch_op:
        batch_op.drop_column("required_approvals")

    with op.batch_alter_table("console_sessions", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_console_sessions_user_id_users"), type_="foreignkey"
        )
        batch_op.drop_constraint(
            batch_op.f("fk_console_sessions_project_id_projects"), type_="foreignkey"
        )
        batch_op.drop_index(batch_op.f("ix_console_sessions_user_id"))
        batch_op.alter_column("key_id", existing_type=sa.VARCHAR(length=40), nullable=False)
        batch_op.drop_column("project_id")
        batch_op.drop_column("user_id")

    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        batch_op.drop_column("actor_user_id")

    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_api_keys_user_id_users"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_api_keys_user_id"))
        batch_op.drop_column("user_id")
        batch_op.drop_column("may_turn_off")
        batch_op.drop_column("role")

    with op.batch_alter_table("memberships", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_memberships_user_id"))

    op.drop_table("memberships")
    op.drop_table("invitations")
    op.drop_table("users")
    with op.batch_alter_table("sign_in_failures", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sign_in_failures_email"))
        batch_op.drop_index(batch_op.f("ix_sign_in_failures_at"))
        batch_op.drop_index(batch_op.f("ix_sign_in_failures_address"))

    op.drop_table("sign_in_failures")
    with op.batch_alter_table("sso_pending", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sso_pending_created_at"))
    op.drop_table("sso_pending")
