"""routine firings: every due time's outcome, and each routine's catch-up policy

`routine_firings` keeps one row per routine and due time (ran, skipped with the reason, failed
with why; `pending` while a firing is being run), unique per due time so two workers, a
restart or a clock that jumps back never fire one due time twice. `routines.catch_up` says
what happens to due times that passed while the routine could not run, and
`routines.accounted_until` is the newest due time with an outcome. `routines.watch` is a
check that runs without the model (a page, a file, a webhook's deliveries) and
`routines.watch_state` what it saw last.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-05 05:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (no batch rebuild of `routines` on SQLite).
    op.add_column(
        "routines",
        sa.Column("catch_up", sa.String(8), nullable=False, server_default="latest"),
    )
    op.add_column("routines", sa.Column("accounted_until", UtcDateTime(timezone=True)))
    op.add_column("routines", sa.Column("watch", sa.JSON(), nullable=True))
    op.add_column("routines", sa.Column("watch_state", sa.Text(), nullable=True))
    # A routine that fired before this revision has accounted for its due times up to then.
    op.execute("UPDATE routines SET accounted_until = last_fired_at")
    op.create_table(
        "routine_firings",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column(
            "routine_id",
            sa.String(64),
            sa.ForeignKey("routines.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("due_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("missed", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("late", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("message_id", sa.String(64), nullable=True),
        sa.Column("recorded_at", UtcDateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("routine_id", "due_at", name="uq_routine_firing_due"),
    )


def downgrade() -> None:
    op.drop_table("routine_firings")
    op.execute("ALTER TABLE routines DROP COLUMN watch_state")
    op.execute("ALTER TABLE routines DROP COLUMN watch")
    op.execute("ALTER TABLE routines DROP COLUMN accounted_until")
    op.execute("ALTER TABLE routines DROP COLUMN catch_up")
