"""change requests: ``change_requests`` (proposed changes to a protected environment, with the
setting versions they were based on) and ``change_request_reviews`` (approvals and rejections)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "change_requests",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("environment_id", sa.String(length=40), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("author", sa.String(length=200), nullable=False),
        sa.Column("author_identity", sa.String(length=64), nullable=False),
        sa.Column("author_user_id", sa.String(length=40), nullable=True),
        sa.Column("author_key_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("changes", JSON, nullable=False),
        sa.Column("bases", JSON, nullable=False),
        sa.Column("apply_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("applied_by", sa.String(length=200), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["environments.id"],
            name=op.f("fk_change_requests_environment_id_environments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_change_requests_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_requests")),
    )
    with op.batch_alter_table("change_requests", schema=None) as batch_op:
        batch_op.create_index("ix_change_requests_due", ["status", "apply_at"], unique=False)
        batch_op.create_index(
            "ix_change_requests_project", ["project_id", "status", "id"], unique=False
        )

    op.create_table(
        "change_request_reviews",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("change_request_id", sa.String(length=40), nullable=False),
        sa.Column("reviewer", sa.String(length=200), nullable=False),
        sa.Column("reviewer_identity", sa.String(length=64), nullable=False),
        sa.Column("reviewer_user_id", sa.String(length=40), nullable=True),
        sa.Column("reviewer_key_id", sa.String(length=40), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request_version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["change_request_id"],
            ["change_requests.id"],
            name=op.f("fk_change_request_reviews_change_request_id_change_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_request_reviews")),
    )
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_change_request_reviews_change_request_id"),
            ["change_request_id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("change_request_reviews", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_change_request_reviews_change_request_id"))
    op.drop_table("change_request_reviews")
    with op.batch_alter_table("change_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_change_requests_project")
        batch_op.drop_index("ix_change_requests_due")
    op.drop_table("change_requests")
