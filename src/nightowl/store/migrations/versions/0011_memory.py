"""memory: profile facts, work log, notes, skills, memory passes, and the search index

The search index (`memory_index`) is kept by triggers on messages and the memory tables, so
every writer of those tables keeps it current. SQLite searches it through an FTS5 table
(`memory_fts`, porter stemming); PostgreSQL through a generated tsvector column with a GIN index.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 12:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nightowl.store.tables import UtcDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# (table, kind, body expression, user id expression, time expression, expiry expression,
# columns whose update re-indexes the row) over the row `R` (NEW or OLD in a trigger).
SOURCES = (
    (
        "messages",
        "message",
        "R.body",
        "(SELECT owner_id FROM conversations WHERE id = R.conversation_id)",
        "R.created_at",
        "NULL",
        "body",
    ),
    ("memory_facts", "fact", "R.text", "R.user_id", "R.updated_at", "NULL", "text, updated_at"),
    ("memory_log", "log", "R.summary", "R.user_id", "R.created_at", "NULL", "summary"),
    (
        "memory_notes",
        "note",
        "R.text",
        "R.user_id",
        "R.created_at",
        "R.expires_at",
        "text, expires_at",
    ),
    (
        "memory_skills",
        "skill",
        "R.name || ': ' || R.description || ' ' || R.body",
        "R.user_id",
        "R.updated_at",
        "NULL",
        "name, description, body",
    ),
)


def _when() -> sa.Column[object]:
    return sa.Column("created_at", UtcDateTime(timezone=True), nullable=False)


def _user() -> sa.Column[object]:
    return sa.Column(
        "user_id", sa.String(64), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )


def _tables() -> None:
    op.create_table(
        "memory_facts",
        sa.Column("id", sa.String(64), primary_key=True),
        _user(),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("trust", sa.String(16), nullable=False),
        sa.Column("source_conversation_id", sa.String(64), nullable=True),
        sa.Column("source_message_id", sa.String(64), nullable=True),
        sa.Column("source_turn_id", sa.String(200), nullable=True),
        sa.Column("created_by", sa.String(16), nullable=False),
        _when(),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("use_count", sa.Integer(), nullable=False),
        sa.Column("archived_at", UtcDateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_memory_facts_user", "memory_facts", ["user_id", "archived_at"])
    op.create_table(
        "memory_log",
        sa.Column("id", sa.String(64), primary_key=True),
        _user(),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("turn_id", sa.String(200), nullable=True, unique=True),
        sa.Column("summary", sa.Text(), nullable=False),
        _when(),
        sa.Column("last_used_at", UtcDateTime(timezone=True), nullable=True),
        sa.Column("use_count", sa.Integer(), nullable=False),
        sa.Column("archived_at", UtcDateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_memory_log_user", "memory_log", ["user_id", "created_at"])
    op.create_table(
        "memory_notes",
        sa.Column("id", sa.String(64), primary_key=True),
        _user(),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        _when(),
        sa.Column("expires_at", UtcDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_memory_notes_user", "memory_notes", ["user_id", "expires_at"])
    op.create_table(
        "memory_skills",
        sa.Column("id", sa.String(64), primary_key=True),
        _user(),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("description", sa.String(300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(16), nullable=False),
        sa.Column("approved", sa.Boolean(), nullable=False),
        _when(),
        sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("user_id", "name", name="uq_skill_name"),
    )
    op.create_table(
        "memory_passes",
        sa.Column("turn_id", sa.String(200), primary_key=True),
        _user(),
        sa.Column("conversation_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=False),
        _when(),
    )
    op.create_index("ix_memory_passes_user_id", "memory_passes", ["user_id"])
    op.create_table(
        "memory_consolidations",
        sa.Column("id", sa.String(64), primary_key=True),
        _user(),
        sa.Column("turn_id", sa.String(200), nullable=True),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("removed", sa.JSON(), nullable=False),
        sa.Column("added", sa.JSON(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        _when(),
    )
    op.create_index("ix_memory_consolidations_user_id", "memory_consolidations", ["user_id"])
    op.create_table(
        "memory_index",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("at", UtcDateTime(timezone=True), nullable=False),
        sa.Column("expires_at", UtcDateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("kind", "item_id", name="uq_memory_index_item"),
    )
    op.create_index("ix_memory_index_user", "memory_index", ["user_id", "kind"])
    op.create_table(
        "memory_vectors",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("item_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.UniqueConstraint("kind", "item_id", name="uq_memory_vectors_item"),
    )
    op.create_index("ix_memory_vectors_user", "memory_vectors", ["user_id", "id"])


def _sqlite_index() -> None:
    op.execute(
        "CREATE VIRTUAL TABLE memory_fts USING fts5(body, content='memory_index',"
        " content_rowid='id', tokenize='porter unicode61')"
    )
    op.execute(
        "CREATE TRIGGER memory_index_ai AFTER INSERT ON memory_index BEGIN"
        " INSERT INTO memory_fts(rowid, body) VALUES (new.id, new.body); END"
    )
    op.execute(
        "CREATE TRIGGER memory_index_ad AFTER DELETE ON memory_index BEGIN"
        " INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', old.id, old.body);"
        " DELETE FROM memory_vectors WHERE kind = old.kind AND item_id = old.item_id; END"
    )
    op.execute(
        "CREATE TRIGGER memory_index_au AFTER UPDATE ON memory_index BEGIN"
        " INSERT INTO memory_fts(memory_fts, rowid, body) VALUES ('delete', old.id, old.body);"
        " INSERT INTO memory_fts(rowid, body) VALUES (new.id, new.body); END"
    )
    for table, kind, body, user, at, expires, columns in SOURCES:
        values = ", ".join(
            part.replace("R.", "new.") for part in (f"'{kind}'", "new.id", user, body, at, expires)
        )
        insert = (
            "INSERT INTO memory_index(kind, item_id, user_id, body, at, expires_at)"
            f" VALUES ({values});"
        )
        delete = f"DELETE FROM memory_index WHERE kind = '{kind}' AND item_id = old.id;"
        op.execute(f"CREATE TRIGGER {table}_index_ai AFTER INSERT ON {table} BEGIN {insert} END")
        op.execute(
            f"CREATE TRIGGER {table}_index_au AFTER UPDATE OF {columns} ON {table}"
            f" BEGIN {delete} {insert} END"
        )
        op.execute(f"CREATE TRIGGER {table}_index_ad AFTER DELETE ON {table} BEGIN {delete} END")


def _postgres_index() -> None:
    op.execute(
        "ALTER TABLE memory_index ADD COLUMN tsv tsvector"
        " GENERATED ALWAYS AS (to_tsvector('english', body)) STORED"
    )
    op.execute("CREATE INDEX ix_memory_index_tsv ON memory_index USING GIN (tsv)")
    # An item's embedding goes with its index row (an edit re-indexes, so re-embeds).
    op.execute(
        """
        CREATE FUNCTION memory_index_forget() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          DELETE FROM memory_vectors WHERE kind = OLD.kind AND item_id = OLD.item_id;
          RETURN NULL;
        END $$;
        """
    )
    op.execute(
        "CREATE TRIGGER memory_index_forget AFTER DELETE ON memory_index"
        " FOR EACH ROW EXECUTE FUNCTION memory_index_forget()"
    )
    for table, kind, body, user, at, expires, columns in SOURCES:
        values = ", ".join(
            part.replace("R.", "NEW.") for part in (f"'{kind}'", "NEW.id", user, body, at, expires)
        )
        op.execute(
            f"""
            CREATE FUNCTION {table}_index() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF TG_OP IN ('UPDATE', 'DELETE') THEN
                DELETE FROM memory_index WHERE kind = '{kind}' AND item_id = OLD.id;
              END IF;
              IF TG_OP IN ('INSERT', 'UPDATE') THEN
                INSERT INTO memory_index(kind, item_id, user_id, body, at, expires_at)
                VALUES ({values});
              END IF;
              RETURN NULL;
            END $$;
            """
        )
        op.execute(
            f"CREATE TRIGGER {table}_index AFTER INSERT OR UPDATE OF {columns} OR DELETE"
            f" ON {table}"
            f" FOR EACH ROW EXECUTE FUNCTION {table}_index()"
        )


def upgrade() -> None:
    _tables()
    if op.get_bind().dialect.name == "postgresql":
        _postgres_index()
    else:
        _sqlite_index()
    # Messages written before this revision become searchable too.
    op.execute(
        "INSERT INTO memory_index(kind, item_id, user_id, body, at, expires_at)"
        " SELECT 'message', m.id, c.owner_id, m.body, m.created_at, NULL"
        " FROM messages m JOIN conversations c ON c.id = m.conversation_id"
    )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table, *_ in SOURCES:
        if postgres:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_index ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {table}_index()")
        else:
            for suffix in ("ai", "au", "ad"):
                op.execute(f"DROP TRIGGER IF EXISTS {table}_index_{suffix}")
    if postgres:
        op.execute("DROP TRIGGER IF EXISTS memory_index_forget ON memory_index")
        op.execute("DROP FUNCTION IF EXISTS memory_index_forget()")
    else:
        op.execute("DROP TABLE IF EXISTS memory_fts")
    for table in (
        "memory_vectors",
        "memory_index",
        "memory_consolidations",
        "memory_passes",
        "memory_skills",
        "memory_notes",
        "memory_log",
        "memory_facts",
    ):
        op.drop_table(table)
