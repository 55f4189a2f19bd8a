"""The dated work log: one entry per turn of what the agent did and decided, with the trust of
what it was made from (a turn that read outside text writes an untrusted entry). Stored by
store/memory/worklog.py; its readers are offered here too."""

from __future__ import annotations

from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid
from nightowl.store.memory.worklog import (
    LogEntryInfo,
    delete_entry,
    entries_by_id,
    entry_of_turn,
    get_entry,
    insert_entry,
    mark_used,
    recent_entries,
    update_entry_summary,
)

__all__ = [
    "MAX_ENTRY_CHARS",
    "LogEntryInfo",
    "delete_entry",
    "edit_entry",
    "entries_by_id",
    "get_entry",
    "mark_used",
    "recent_entries",
    "write_entry",
]

MAX_ENTRY_CHARS = 2_000


def _clean(summary: str) -> str:
    cleaned = summary.strip()
    if not cleaned:
        raise Invalid("a work-log entry needs a summary")
    if len(cleaned) > MAX_ENTRY_CHARS:
        raise Invalid(f"a work-log entry is at most {MAX_ENTRY_CHARS} characters")
    return cleaned


def write_entry(
    session: Session,
    user_id: str,
    summary: str,
    conversation_id: str | None = None,
    turn_id: str | None = None,
    trust: str = "owner",
) -> LogEntryInfo:
    """Record what a turn did, as trusted as what it was made from; a turn's entry is written
    once (a re-run returns it)."""
    if turn_id is not None and (found := entry_of_turn(session, turn_id)) is not None:
        return found
    return insert_entry(session, user_id, _clean(summary), conversation_id, turn_id, trust)


def edit_entry(session: Session, user_id: str, entry_id: str, summary: str) -> LogEntryInfo:
    """The owner corrects an entry's summary: it is the owner's word from then on."""
    get_entry(session, user_id, entry_id)  # NotFound before Invalid, as the owner expects
    return update_entry_summary(session, user_id, entry_id, _clean(summary))
