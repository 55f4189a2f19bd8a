"""model calls record their request's section hashes and any cache break

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.add_column(sa.Column("sections", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("cache_break", sa.String(length=300), nullable=True))
        batch.add_column(sa.Column("cache_break_explained", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("model_calls") as batch:
        batch.drop_column("cache_break_explained")
        batch.drop_column("cache_break")
        batch.drop_column("sections")
