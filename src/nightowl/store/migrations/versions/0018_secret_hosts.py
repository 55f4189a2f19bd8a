"""secrets: the hosts each secret may be sent to

Revision ID: 0018
Revises: 0015
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A secret set before this revision is bound to no host: using it over the network waits
    # for the owner's approval until they bind it (`nightowl secrets hosts NAME HOST...`).
    with op.batch_alter_table("secrets") as batch:
        batch.add_column(sa.Column("allowed_hosts", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("secrets") as batch:
        batch.drop_column("allowed_hosts")
