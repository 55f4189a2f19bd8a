"""compactions, timers (pending wakes) and the last cache warming of a conversation

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30 12:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "compactions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("through_entry_id", sa.Integer(), nullable=False),
        sa.Column("entry", sa.JSON(), nullable=False),
        sa.Column("model_call_id", sa.String(64), nullable=True),
        sa.Column("tokens_before", sa.Integer(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_compactions_conversation", "compactions", ["conversation_id", "created_at"])
    op.create_table(
        "timers",
        sa.Column("id", sa.String(300), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("due_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
    )
    op.create_index("ix_timers_conversation", "timers", ["conversation_id", "due_at"])
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("warmed_at", UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("warmed_at")
    op.drop_index("ix_timers_conversation", "timers")
    op.drop_table("timers")
    op.drop_index("ix_compactions_conversation", "compactions")
    op.drop_table("compactions")
