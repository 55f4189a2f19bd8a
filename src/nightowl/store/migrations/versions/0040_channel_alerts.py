"""channel alerts: a binding that carries only a conversation's important messages

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-03 02:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channel_bindings") as table:
        table.add_column(
            sa.Column("alerts_only", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("channel_bindings") as table:
        table.drop_column("alerts_only")
