"""model calls carry their cost; a turn remembers the routine that woke it

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29 18:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.add_column(sa.Column("cost_usd", sa.Float(), nullable=True))
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("routine_id", sa.String(length=64), nullable=True))
        batch.create_index("ix_turns_routine_id", ["routine_id"])


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_index("ix_turns_routine_id")
        batch.drop_column("routine_id")
    with op.batch_alter_table("model_calls") as batch:
        batch.drop_column("cost_usd")
