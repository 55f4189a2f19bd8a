"""answers to questions, turns waiting on them, and the owner's read position

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 14:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("read_seq", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("answer_id", sa.String(length=64), nullable=True))
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("waiting_on", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("waiting_on")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("answer_id")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("read_seq")
