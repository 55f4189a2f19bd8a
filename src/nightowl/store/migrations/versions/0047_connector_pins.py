"""connector pins: what the owner approved of each connector's tools

`connectors.pinned`: the approved definition of each tool (name, description, input schema,
annotations), null until the first listing pins it; `connectors.held`: the names of the listed
tools that differ from their pin or are new, which the model is not offered until the owner
approves them. `connectors.package`: what a stdio server's command runs (its package, version,
npm's integrity, each file's SHA-256), pinned at its first start; `connectors.package_held`:
the package found at a later start that differs from the pin (it does not start until the
owner approves it). A connector that listed its tools before this migration is pinned to that
listing (what its owner has been using).

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None

FIELDS = ("name", "description", "schema", "annotations")


def upgrade() -> None:
    op.add_column("connectors", sa.Column("pinned", sa.JSON(), nullable=True))
    op.add_column("connectors", sa.Column("held", sa.JSON(), nullable=False, server_default="[]"))
    op.add_column("connectors", sa.Column("package", sa.JSON(), nullable=True))
    op.add_column("connectors", sa.Column("package_held", sa.JSON(), nullable=True))
    connectors = sa.table(
        "connectors",
        sa.column("id", sa.String),
        sa.column("tools", sa.JSON),
        sa.column("listed_at", sa.DateTime),
        sa.column("pinned", sa.JSON),
    )
    bind = op.get_bind()
    listed = bind.execute(
        sa.select(connectors.c.id, connectors.c.tools).where(connectors.c.listed_at.is_not(None))
    ).all()
    for connector_id, tools in listed:
        pins = sorted(
            ({k: tool.get(k) for k in FIELDS} for tool in tools or []),
            key=lambda pin: str(pin["name"]),
        )
        bind.execute(connectors.update().where(connectors.c.id == connector_id).values(pinned=pins))


def downgrade() -> None:
    op.execute("ALTER TABLE connectors DROP COLUMN package_held")
    op.execute("ALTER TABLE connectors DROP COLUMN package")
    op.execute("ALTER TABLE connectors DROP COLUMN held")
    op.execute("ALTER TABLE connectors DROP COLUMN pinned")
