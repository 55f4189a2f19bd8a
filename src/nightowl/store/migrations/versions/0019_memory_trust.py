"""memory keeps trust: the work log, notes, skills and routines record the trust of what they
were made from (a turn that read outside text makes untrusted memory, shown fenced)

Existing rows get the trust their conversation suggests, when in doubt outside: a work-log
entry, note or agent-made routine of a conversation that held untrusted content is untrusted;
an agent-made skill the owner never approved is untrusted.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# Conversations whose context held content not from the owner: an untrusted message, or an
# untrusted entry in the model's transcript (a web page, a search hit).
_TAINTED = (
    "SELECT conversation_id FROM messages WHERE trust = 'untrusted' "
    "UNION SELECT conversation_id FROM transcript_entries "
    'WHERE CAST(payload AS TEXT) LIKE \'%"trust": "untrusted"%\''
)


def upgrade() -> None:
    for table, default in (
        ("memory_log", "owner"),
        ("memory_notes", "agent"),
        ("memory_skills", "owner"),
        ("routines", "owner"),
    ):
        op.add_column(
            table, sa.Column("trust", sa.String(16), nullable=False, server_default=default)
        )
    for table in ("memory_log", "memory_notes"):
        op.execute(f"UPDATE {table} SET trust = 'untrusted' WHERE conversation_id IN ({_TAINTED})")
    op.execute(
        "UPDATE routines SET trust = 'untrusted' "
        f"WHERE created_by <> 'owner' AND conversation_id IN ({_TAINTED})"
    )
    op.execute("UPDATE memory_skills SET trust = 'agent' WHERE created_by <> 'owner'")
    op.execute(
        "UPDATE memory_skills SET trust = 'untrusted' WHERE created_by <> 'owner' AND NOT approved"
    )


def downgrade() -> None:
    # Plain ALTER (SQLite 3.35+ has DROP COLUMN): a batch copy of a memory table would lose
    # the search index's triggers (migration 0011).
    for table in ("routines", "memory_skills", "memory_notes", "memory_log"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN trust")
