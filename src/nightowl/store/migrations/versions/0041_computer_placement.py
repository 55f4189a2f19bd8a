"""computer placement: the host a user's computer is awake on, under a lease

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-03 03:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("computers") as table:
        table.add_column(sa.Column("host", sa.String(200), nullable=True))
        table.add_column(sa.Column("host_until", UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("computers") as table:
        table.drop_column("host_until")
        table.drop_column("host")
