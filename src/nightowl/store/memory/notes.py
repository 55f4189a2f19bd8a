"""Notes in the store: the scratchpad's rows, each change recorded as a version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from nightowl.store.memory.owned import owned_item
from nightowl.store.memory_tables import MemoryNote
from nightowl.store.memory_versions import Author, record, remove_recorded, snapshot
from nightowl.store.row_views import view_of
from nightowl.store.tables import utcnow


@dataclass(frozen=True)
class NoteInfo:
    """A note and when it expires."""

    id: str
    conversation_id: str | None
    text: str
    created_at: datetime
    expires_at: datetime
    trust: str  # memory-trust: agent | untrusted (written in a turn that read outside text)


def _info(row: MemoryNote) -> NoteInfo:
    return view_of(NoteInfo, row)


def find_note(session: Session, note_id: str) -> NoteInfo | None:
    """The note of this id, if there is one."""
    row = session.get(MemoryNote, note_id)
    return None if row is None else _info(row)


def insert_note(
    session: Session,
    note_id: str,
    user_id: str,
    text: str,
    expires_at: datetime,
    conversation_id: str | None,
    trust: str,
    by: Author,
    now: datetime,
) -> NoteInfo:
    """Store a new note (its text checked already); a version records it."""
    row = MemoryNote(
        id=note_id,
        user_id=user_id,
        conversation_id=conversation_id,
        text=text,
        trust=trust,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    record(session, "note", note_id, user_id, "added", None, snapshot(row), by)
    return _info(row)


def live_notes(session: Session, user_id: str, now: datetime | None = None) -> list[NoteInfo]:
    """The user's notes that have not expired, oldest first."""
    rows = session.scalars(_LIVE_NOTES, {"user_id": user_id, "now": now or utcnow()})
    return [_info(row) for row in rows]


# Prebuilt: every turn's memory note reads them.
_LIVE_NOTES = (
    select(MemoryNote)
    .where(MemoryNote.user_id == bindparam("user_id"), MemoryNote.expires_at > bindparam("now"))
    .order_by(MemoryNote.created_at, MemoryNote.id)
)


def delete_note(session: Session, user_id: str, note_id: str) -> None:
    """Delete one of the user's notes."""
    row = owned_item(session, MemoryNote, note_id, user_id, f"no note {note_id}")
    remove_recorded(session, "note", row, user_id)


def delete_expired(session: Session, now: datetime | None = None) -> int:
    """Delete every expired note; how many went."""
    result = session.execute(delete(MemoryNote).where(MemoryNote.expires_at <= (now or utcnow())))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
