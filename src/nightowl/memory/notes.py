"""Notes: a scratchpad for the state of the current task; each expires (minutes to hours). A
note the agent writes in a turn that read outside text is untrusted (shown fenced)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import keyed_id, new_id
from nightowl.store.memory_tables import MemoryNote
from nightowl.store.memory_versions import OWNER, Author, record, snapshot
from nightowl.store.tables import utcnow

MIN_MINUTES = 1
MAX_MINUTES = 7 * 24 * 60
MAX_NOTE_CHARS = 2_000


@dataclass(frozen=True)
class NoteInfo:
    """A note and when it expires."""

    id: str
    user_id: str
    conversation_id: str | None
    text: str
    created_at: datetime
    expires_at: datetime
    trust: str = "agent"


def _info(row: MemoryNote) -> NoteInfo:
    return NoteInfo(
        row.id,
        row.user_id,
        row.conversation_id,
        row.text,
        row.created_at,
        row.expires_at,
        row.trust,
    )


def write_note(
    session: Session,
    user_id: str,
    text: str,
    expires_in_minutes: float,
    conversation_id: str | None = None,
    key: str | None = None,
    trust: str = "agent",
    *,
    by: Author | None = None,
) -> NoteInfo:
    """Keep a note for `expires_in_minutes` (1 minute to 7 days), as trusted as the turn that
    wrote it; once per `key` (a tool call run again after a crash finds the note it made)."""
    cleaned = text.strip()
    if not cleaned:
        raise Invalid("a note needs some text")
    if len(cleaned) > MAX_NOTE_CHARS:
        raise Invalid(f"a note is at most {MAX_NOTE_CHARS} characters; keep it short")
    if not MIN_MINUTES <= expires_in_minutes <= MAX_MINUTES:
        raise Invalid(f"a note expires in {MIN_MINUTES} to {MAX_MINUTES} minutes (7 days)")
    note_id = new_id("note") if key is None else keyed_id("note", key)
    if key is not None and (existing := session.get(MemoryNote, note_id)) is not None:
        return _info(existing)
    now = utcnow()
    row = MemoryNote(
        id=note_id,
        user_id=user_id,
        conversation_id=conversation_id,
        text=cleaned,
        trust=trust,
        created_at=now,
        expires_at=now + timedelta(minutes=expires_in_minutes),
    )
    session.add(row)
    session.flush()
    by = by or Author("agent", conversation_id=conversation_id, trust=trust)
    record(session, "note", note_id, user_id, "added", None, snapshot(row), by)
    return _info(row)


def live_notes(session: Session, user_id: str, now: datetime | None = None) -> list[NoteInfo]:
    """The user's notes that have not expired, oldest first."""
    rows = session.scalars(
        select(MemoryNote)
        .where(MemoryNote.user_id == user_id, MemoryNote.expires_at > (now or utcnow()))
        .order_by(MemoryNote.created_at, MemoryNote.id)
    )
    return [_info(row) for row in rows]


def delete_note(session: Session, user_id: str, note_id: str) -> None:
    """Delete one of the user's notes."""
    row = session.get(MemoryNote, note_id)
    if row is None or row.user_id != user_id:
        raise NotFound(f"no note {note_id}")
    before = snapshot(row)
    session.delete(row)
    session.flush()
    record(session, "note", note_id, user_id, "removed", before, None, OWNER)


def delete_expired(session: Session, now: datetime | None = None) -> int:
    """Delete every expired note; how many went."""
    result = session.execute(delete(MemoryNote).where(MemoryNote.expires_at <= (now or utcnow())))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
