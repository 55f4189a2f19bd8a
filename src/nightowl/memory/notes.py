"""Notes: a scratchpad for the state of the current task; each expires (minutes to hours). A
note the agent writes in a turn that read outside text is untrusted (shown fenced). Stored by
store/memory/notes.py; its readers are offered here too."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid
from nightowl.store.ids import keyed_id, new_id
from nightowl.store.memory.notes import (
    NoteInfo,
    delete_expired,
    delete_note,
    find_note,
    insert_note,
    live_notes,
)
from nightowl.store.memory_versions import Author
from nightowl.store.tables import utcnow

__all__ = [
    "MAX_MINUTES",
    "MAX_NOTE_CHARS",
    "MIN_MINUTES",
    "NoteInfo",
    "delete_expired",
    "delete_note",
    "live_notes",
    "write_note",
]

MIN_MINUTES = 1
MAX_MINUTES = 7 * 24 * 60
MAX_NOTE_CHARS = 2_000


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
    if key is not None and (existing := find_note(session, note_id)) is not None:
        return existing
    now = utcnow()
    expires_at = now + timedelta(minutes=expires_in_minutes)
    by = by or Author("agent", conversation_id=conversation_id, trust=trust)
    return insert_note(
        session, note_id, user_id, cleaned, expires_at, conversation_id, trust, by, now
    )
