"""push: Web Push subscriptions per device, deliveries (one per message and device), settings

Revision ID: 0036
Revises: 0026
Create Date: 2026-12-01 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0036"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "push_subscriptions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "user_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("endpoint", sa.String(1000), nullable=False, unique=True),
        sa.Column("p256dh", sa.String(200), nullable=False),
        sa.Column("auth", sa.String(100), nullable=False),
        sa.Column("device", sa.String(200), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_sent_at", UtcDateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_push_subscriptions_user_id", "push_subscriptions", ["user_id"])
    op.create_table(
        "push_deliveries",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column(
            "subscription_id",
            sa.String(64),
            sa.ForeignKey("push_subscriptions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("urgent", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", UtcDateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", UtcDateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_push_deliveries_due", "push_deliveries", ["status", "not_before"])
    op.create_index("ix_push_deliveries_message_id", "push_deliveries", ["message_id"])
    op.create_index("ix_push_deliveries_subscription_id", "push_deliveries", ["subscription_id"])
    op.create_table(
        "push_settings",
        sa.Column(
            "user_id",
            sa.String(64),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("quiet_start", sa.String(5), nullable=True),
        sa.Column("quiet_end", sa.String(5), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("include_text", sa.Boolean(), nullable=False),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("push_settings")
    op.drop_table("push_deliveries")
    op.drop_table("push_subscriptions")
