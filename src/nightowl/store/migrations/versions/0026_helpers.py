"""helpers: sub-agents with a conversation of their own, working for a parent conversation

Revision ID: 0026
Revises: 0023
Create Date: 2026-12-01 14:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0026"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "helpers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "owner_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "parent_conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id"),
            nullable=False,
            unique=True,
        ),
        sa.Column("name", sa.String(100), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("progress", sa.String(300), nullable=False),
        sa.Column("report", sa.Text(), nullable=True),
        sa.Column("report_trust", sa.String(16), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("started_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", UtcDateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_helpers_owner_id", "helpers", ["owner_id"])
    op.create_index("ix_helpers_parent", "helpers", ["parent_conversation_id", "created_at"])


def downgrade() -> None:
    op.drop_table("helpers")
