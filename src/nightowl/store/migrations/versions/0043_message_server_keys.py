"""messages.server_key: the server's own message keys leave the clients' id namespace

A client's `client_id` and the keys the server makes (the outbox's `out:turn:call`, a notice's
`guard:turn`, a helper's `task:run` and `guide:turn:call`, a channel answer's
`channel:event`) shared one column, so a client could take a key the server was about to use
(an agent's message would then look delivered and never be shown) or collide with one (a 500).
The server's keys move to a column of their own, unique per conversation like `client_id`.

Which stored keys are the server's: every key on an agent's message or a runtime notice (only
the outbox sets one there), and on an owner's message the helper keys (`task:`, `guide:`) and
a channel answer's key (a channel's id, then `:`). Anything else a client sent.

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-04 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None

# Rows whose client_id the server made (see the module's docstring).
_SERVERS = """
    client_id IS NOT NULL AND (
        role <> 'user'
        OR client_id LIKE 'task:%'
        OR client_id LIKE 'guide:%'
        OR EXISTS (
            SELECT 1 FROM channels
            WHERE substr(messages.client_id, 1, length(channels.id) + 1) = channels.id || ':'
        )
    )
"""


def upgrade() -> None:
    # Plain ADD COLUMN and CREATE INDEX: a batch rebuild of `messages` on SQLite would drop the
    # triggers that keep the memory search index (migration 0011).
    op.add_column("messages", sa.Column("server_key", sa.String(length=300), nullable=True))
    op.execute(f"UPDATE messages SET server_key = client_id, client_id = NULL WHERE {_SERVERS}")
    op.create_index(
        "uq_message_server_key", "messages", ["conversation_id", "server_key"], unique=True
    )


def downgrade() -> None:
    # A server key goes back into client_id only where no client's id already holds that value
    # in the conversation (the old single namespace could not hold both).
    op.execute(
        "UPDATE messages SET client_id = substr(server_key, 1, 200)"
        " WHERE server_key IS NOT NULL AND client_id IS NULL AND NOT EXISTS ("
        "   SELECT 1 FROM messages AS other"
        "   WHERE other.conversation_id = messages.conversation_id"
        "   AND other.client_id = substr(messages.server_key, 1, 200))"
    )
    op.drop_index("uq_message_server_key", table_name="messages")
    # ALTER TABLE ... DROP COLUMN is native on SQLite 3.35+ and PostgreSQL (no table rebuild).
    op.execute("ALTER TABLE messages DROP COLUMN server_key")
