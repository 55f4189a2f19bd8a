"""messages by time: the parrot guard reads an owner's newest messages across conversations

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-01 21:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_messages_created", "messages", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_messages_created", table_name="messages")
