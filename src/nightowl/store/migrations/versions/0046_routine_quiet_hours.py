"""routine quiet hours: whether a routine runs during its owner's quiet hours

`routines.quiet_hours`: `run` (default: it runs, its messages wait for the quiet hours to end
like any other push) or `skip` (a due time inside the owner's quiet hours is recorded as
`skipped: quiet hours …`, and no turn runs).

Revision ID: 0046
Revises: 0045
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "routines",
        sa.Column("quiet_hours", sa.String(length=8), nullable=False, server_default="run"),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE routines DROP COLUMN quiet_hours")
