"""memory versions: every change to a profile fact, skill, note or routine, revertible

`memory_versions`: the item's state before and after (null: it did not exist), the author
(owner, agent, memory_pass, upkeep), the turn, conversation and message it came from, and that
source's trust; `reverted_by` marks a change a later revert undid. Items that exist already
have no history before this; their next change records the state they had.

Revision ID: 0048
Revises: 0047
Create Date: 2026-12-06 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None


def upgrade() -> None:
    big = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "memory_versions",
        sa.Column("id", big, primary_key=True, autoincrement=True),
        sa.Column(
            "user_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("author", sa.String(16), nullable=False),
        sa.Column("turn_id", sa.String(200), nullable=True),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("trust", sa.String(16), nullable=False, server_default="owner"),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("reverted_by", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_memory_versions_item", "memory_versions", ["user_id", "kind", "item_id"])
    op.create_index("ix_memory_versions_turn", "memory_versions", ["user_id", "turn_id"])


def downgrade() -> None:
    op.drop_index("ix_memory_versions_turn", "memory_versions")
    op.drop_index("ix_memory_versions_item", "memory_versions")
    op.drop_table("memory_versions")
