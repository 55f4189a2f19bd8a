"""channel listener: one worker listens on a channel at a time, under a lease

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-02 22:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as table:
        table.add_column(sa.Column("listener", sa.String(200), nullable=True))
        table.add_column(sa.Column("listener_until", UtcDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channels") as table:
        table.drop_column("listener_until")
        table.drop_column("listener")
