"""The memory tables: profile facts, the work log, notes, skills, the memory pass's records and
the search index (kept by database triggers, see migration 0011)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from nightowl.store.tables import Base, BigId, utcnow


class MemoryFact(Base):
    """A profile fact about a user, with where it came from and how much it is used."""

    __tablename__ = "memory_facts"
    __table_args__ = (Index("ix_memory_facts_user", "user_id", "archived_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    text: Mapped[str] = mapped_column(Text)
    # The trust of the content the fact was drawn from: owner | member | untrusted.
    trust: Mapped[str] = mapped_column(String(16))
    source_conversation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    source_message_id: Mapped[str | None] = mapped_column(String(64), default=None)
    source_turn_id: Mapped[str | None] = mapped_column(String(200), default=None)
    created_by: Mapped[str] = mapped_column(String(16), default="agent")  # agent | owner
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    use_count: Mapped[int] = mapped_column(BigInteger, default=0)
    archived_at: Mapped[datetime | None] = mapped_column(default=None)


class WorkLogEntry(Base):
    """A dated entry of the work log: what the agent did and decided in one turn."""

    __tablename__ = "memory_log"
    __table_args__ = (Index("ix_memory_log_user", "user_id", "created_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    conversation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    turn_id: Mapped[str | None] = mapped_column(String(200), default=None, unique=True)
    summary: Mapped[str] = mapped_column(Text)
    # The trust of what the entry was made from: owner | member | untrusted (a turn that read
    # outside text writes an untrusted entry; the prompt shows it fenced).
    trust: Mapped[str] = mapped_column(String(16), default="owner")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    use_count: Mapped[int] = mapped_column(BigInteger, default=0)
    archived_at: Mapped[datetime | None] = mapped_column(default=None)


class MemoryNote(Base):
    """A scratchpad note for the current task; it expires."""

    __tablename__ = "memory_notes"
    __table_args__ = (Index("ix_memory_notes_user", "user_id", "expires_at"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    conversation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    text: Mapped[str] = mapped_column(Text)
    # agent | untrusted (written in a turn that read outside text; shown fenced).
    trust: Mapped[str] = mapped_column(String(16), default="agent")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()


class Skill(Base):
    """A markdown how-to: its name and one-line description are in the prompt, its body is
    loaded by a tool. A skill the agent wrote waits for the owner's review."""

    __tablename__ = "memory_skills"
    __table_args__ = (UniqueConstraint("user_id", "name", name="uq_skill_name"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    description: Mapped[str] = mapped_column(String(300))
    body: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(16))  # agent | owner
    # owner | agent | untrusted (written in a turn that read outside text; approval does not
    # change it, only the owner's own rewrite does).
    trust: Mapped[str] = mapped_column(String(16), default="owner")
    approved: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryPassRecord(Base):
    """One memory pass (at most one per turn): what it changed and what it cost."""

    __tablename__ = "memory_passes"
    turn_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    conversation_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(300), default="")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # {"added": n, "replaced": n, "removed": n, "rejected": [...], "ignored": [...]}
    outcome: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryConsolidation(Base):
    """A consolidation of a full profile: which facts went, which came, and how."""

    __tablename__ = "memory_consolidations"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    turn_id: Mapped[str | None] = mapped_column(String(200), default=None)
    method: Mapped[str] = mapped_column(String(16))  # model | least_used | rejected
    removed: Mapped[list[str]] = mapped_column(JSON, default=list)
    added: Mapped[list[str]] = mapped_column(JSON, default=list)
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryIndexRow(Base):
    """One searchable item (message, fact, log entry, note, skill), kept by triggers.

    SQLite searches it through the FTS5 table `memory_fts`; PostgreSQL through its `tsv`
    column (a generated tsvector with a GIN index), both made by migration 0011."""

    __tablename__ = "memory_index"
    __table_args__ = (
        UniqueConstraint("kind", "item_id", name="uq_memory_index_item"),
        Index("ix_memory_index_user", "user_id", "kind"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))  # message | fact | log | note | skill
    item_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime | None] = mapped_column(default=None)


class MemoryVector(Base):
    """The embedding of an indexed item (optional semantic search), as float32 bytes."""

    __tablename__ = "memory_vectors"
    __table_args__ = (
        UniqueConstraint("kind", "item_id", name="uq_memory_vectors_item"),
        Index("ix_memory_vectors_user", "user_id", "id"),
    )
    # Grows with every vector written: (count, max id) of a user's vectors tells a cached
    # matrix whether it is still current.
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    item_id: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(100))
    vector: Mapped[bytes] = mapped_column(LargeBinary)


class MemoryVersion(Base):
    """One change to a profile fact, skill or note: what it was before and after (null: it
    did not exist), who made it, in which turn and from which message, and that source's
    trust. A revert is a change too, and marks the change it undid (`reverted_by`)."""

    __tablename__ = "memory_versions"
    __table_args__ = (
        Index("ix_memory_versions_item", "user_id", "kind", "item_id"),
        Index("ix_memory_versions_turn", "user_id", "turn_id"),
    )
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(8))  # fact | skill | note | routine
    item_id: Mapped[str] = mapped_column(String(64))
    # added | changed | archived | restored | removed | reverted
    action: Mapped[str] = mapped_column(String(16))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    author: Mapped[str] = mapped_column(String(16))  # owner | agent | memory_pass | upkeep
    turn_id: Mapped[str | None] = mapped_column(String(200), default=None)
    conversation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    message_id: Mapped[str | None] = mapped_column(String(64), default=None)
    trust: Mapped[str] = mapped_column(String(16), default="owner")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    reverted_by: Mapped[int | None] = mapped_column(BigInteger, default=None)
