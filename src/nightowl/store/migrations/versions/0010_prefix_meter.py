"""the prefix-cache meter on model calls

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 19:25:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.add_column(
            sa.Column("meter_prompt_tokens", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("meter_prefix_tokens", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.drop_column("meter_prefix_tokens")
        batch.drop_column("meter_prompt_tokens")
