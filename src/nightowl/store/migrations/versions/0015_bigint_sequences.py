"""64-bit sequence numbers and growing ids on PostgreSQL; recent webhook signatures

Message sequence numbers (and the read and batch positions that point at them), the
transcript's, audit log's and memory index's row ids, and memory use counts grow with use; as
PostgreSQL `integer` they would stop working at 2^31. They become `bigint`, with their data;
the row ids' sequences too. SQLite's integers are 64-bit already, so nothing changes there.
`webhook_signatures` remembers each signed delivery for a while, so a replayed one is refused.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COLUMNS = (
    ("conversations", "last_seq"),
    ("conversations", "read_seq"),
    ("messages", "seq"),
    ("turns", "batch_first_seq"),
    ("turns", "batch_last_seq"),
    ("compactions", "through_entry_id"),
    ("memory_facts", "use_count"),
    ("memory_log", "use_count"),
)
# Autoincrementing ids: the column and the sequence that feeds it.
SERIALS = (
    ("transcript_entries", "id"),
    ("audit_events", "id"),
    ("memory_index", "id"),
    ("memory_vectors", "id"),
)


def _retype(to: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in (*COLUMNS, *SERIALS):
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {to}")
    for table, column in SERIALS:
        sequence = op.get_bind().scalar(
            sa.text("SELECT pg_get_serial_sequence(:table, :column)"),
            {"table": table, "column": column},
        )
        if sequence:
            op.execute(f"ALTER SEQUENCE {sequence} AS {to}")


def upgrade() -> None:
    _retype("bigint")
    op.create_table(
        "webhook_signatures",
        sa.Column("hook_id", sa.String(64), primary_key=True),
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("delivery", sa.String(200), nullable=False),
        sa.Column("seen_at", UtcDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_webhook_signatures_seen_at", "webhook_signatures", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_signatures_seen_at", "webhook_signatures")
    op.drop_table("webhook_signatures")
    _retype("integer")
