"""eval cases: failures turned into replayable cases, and each replay's result

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-03 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import BigId, UtcDateTime

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None


def _when(name: str) -> sa.Column:  # type: ignore[type-arg]
    return sa.Column(name, UtcDateTime(timezone=True), nullable=False)


def upgrade() -> None:
    op.create_table(
        "eval_cases",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "owner_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("source_key", sa.String(300), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("turn_id", sa.String(200), nullable=True),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("checker", sa.JSON(), nullable=False),
        _when("created_at"),
        _when("updated_at"),
        sa.UniqueConstraint("source", "source_key", name="uq_eval_case_source"),
    )
    op.create_index("ix_eval_cases_owner_id", "eval_cases", ["owner_id"])
    op.create_table(
        "eval_results",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("case_id", sa.String(100), nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        _when("created_at"),
    )
    op.create_index("ix_eval_results_run_id", "eval_results", ["run_id"])
    op.create_index("ix_eval_results_case_id", "eval_results", ["case_id"])


def downgrade() -> None:
    op.drop_table("eval_results")
    op.drop_table("eval_cases")
