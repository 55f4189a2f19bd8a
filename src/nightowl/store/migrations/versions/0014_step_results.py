"""step results (a re-run step returns what its committed attempt returned), the owner and
trust of large outputs, the step of each tool run (an earlier attempt that never finished is
known on recovery), and how many times in a row a turn's process died while it ran

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 12:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_results",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "output_blobs",
        sa.Column("owner_id", sa.String(64), primary_key=True),
        sa.Column("reference", sa.String(80), primary_key=True),
        sa.Column("trust", sa.String(16), nullable=False),
        sa.Column("created_at", UtcDateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("tool_runs") as table:
        table.add_column(sa.Column("step_key", sa.String(300), nullable=True))
        table.create_index("ix_tool_runs_step_key", ["step_key"])
    with op.batch_alter_table("turns") as table:
        table.add_column(
            sa.Column("starts_without_progress", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("turns") as table:
        table.drop_column("starts_without_progress")
    with op.batch_alter_table("tool_runs") as table:
        table.drop_index("ix_tool_runs_step_key")
        table.drop_column("step_key")
    op.drop_table("output_blobs")
    op.drop_table("step_results")
