"""channels: configured channels, their bindings to conversations, thread refs, deliveries

Revision ID: 0030
Revises: 0026
Create Date: 2026-12-01 16:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import BigId, UtcDateTime

revision = "0030"
down_revision = "0026"
branch_labels = None
depends_on = None


def _when(name: str, nullable: bool = False) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, UtcDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "owner_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("position", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        _when("created_at"),
        _when("updated_at"),
        sa.UniqueConstraint("owner_id", "name", name="uq_channel_name"),
    )
    op.create_index("ix_channels_owner_id", "channels", ["owner_id"])
    op.create_table(
        "channel_bindings",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "channel_id",
            sa.String(64),
            sa.ForeignKey("channels.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("address", sa.JSON(), nullable=False),
        sa.Column("planned_seq", sa.BigInteger(), nullable=False),
        _when("created_at"),
        sa.UniqueConstraint("channel_id", "conversation_id", name="uq_channel_binding"),
    )
    op.create_index("ix_channel_bindings_conversation_id", "channel_bindings", ["conversation_id"])
    op.create_table(
        "channel_thread_refs",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column(
            "channel_id",
            sa.String(64),
            sa.ForeignKey("channels.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("external_id", sa.String(300), nullable=False),
        sa.Column(
            "conversation_id",
            sa.String(64),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.UniqueConstraint("channel_id", "external_id", name="uq_channel_ref"),
    )
    op.create_table(
        "channel_deliveries",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "channel_id",
            sa.String(64),
            sa.ForeignKey("channels.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "binding_id",
            sa.String(64),
            sa.ForeignKey("channel_bindings.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        _when("next_at"),
        _when("lease_until", nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("external_id", sa.String(300), nullable=True),
        _when("created_at"),
        _when("sent_at", nullable=True),
        sa.UniqueConstraint("message_id", "channel_id", name="uq_channel_delivery"),
    )
    op.create_index("ix_channel_deliveries_due", "channel_deliveries", ["state", "next_at"])
    op.create_index(
        "ix_channel_deliveries_conversation_id", "channel_deliveries", ["conversation_id"]
    )


def downgrade() -> None:
    op.drop_table("channel_deliveries")
    op.drop_table("channel_thread_refs")
    op.drop_table("channel_bindings")
    op.drop_table("channels")
