"""deliveries by external id: a reaction on a channel names the event it reacts to

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-02 22:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_channel_deliveries_external",
        "channel_deliveries",
        ["channel_id", "external_id"],
    )


def downgrade() -> None:
    op.drop_index("ix_channel_deliveries_external", table_name="channel_deliveries")
