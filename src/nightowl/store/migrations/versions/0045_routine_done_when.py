"""routine postconditions: what done means for a routine's run

`routines.done_when` (JSON, harness/done_when.py): checked when a run's turn ends; a run
without it is recorded as `failed: not done …` and the next run is told.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-05 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("routines", sa.Column("done_when", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE routines DROP COLUMN done_when")
