"""prompt pins: a conversation's instructions, catalogue and schemas as first sent

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompt_pins",
        sa.Column(
            "conversation_id",
            sa.String(length=64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("pin", sa.JSON(), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("prompt_pins")
