"""computers: each user's sandbox uid and last snapshot

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 17:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "computers",
        sa.Column(
            "user_id",
            sa.String(length=64),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("uid", sa.Integer(), nullable=False, unique=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("snapshot", sa.String(length=80), nullable=True),
        sa.Column("snapshot_bytes", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("computers")
