"""The dated work log: one entry per turn of what the agent did and decided, with the trust of
what it was made from (a turn that read outside text writes an untrusted entry)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.memory_tables import WorkLogEntry
from nightowl.store.tables import utcnow

MAX_ENTRY_CHARS = 2_000


@dataclass(frozen=True)
class LogEntryInfo:
    """A work-log entry."""

    id: str
    user_id: str
    conversation_id: str | None
    turn_id: str | None
    summary: str
    created_at: datetime
    last_used_at: datetime | None
    use_count: int
    archived: bool
    trust: str = "owner"


def _info(row: WorkLogEntry) -> LogEntryInfo:
    return LogEntryInfo(
        row.id,
        row.user_id,
        row.conversation_id,
        row.turn_id,
        row.summary,
        row.created_at,
        row.last_used_at,
        row.use_count,
        row.archived_at is not None,
        row.trust,
    )


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
    if turn_id is not None:
        found = session.scalar(select(WorkLogEntry).where(WorkLogEntry.turn_id == turn_id))
        if found is not None:
            return _info(found)
    row = WorkLogEntry(
        id=new_id("log"),
        user_id=user_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        summary=_clean(summary),
        trust=trust,
        created_at=utcnow(),
        use_count=0,
    )
    session.add(row)
    session.flush()
    return _info(row)


def _row(session: Session, user_id: str, entry_id: str) -> WorkLogEntry:
    row = session.get(WorkLogEntry, entry_id)
    if row is None or row.user_id != user_id:
        raise NotFound(f"no work-log entry {entry_id}")
    return row


def get_entry(session: Session, user_id: str, entry_id: str) -> LogEntryInfo:
    """One of the user's entries (NotFound for anyone else's)."""
    return _info(_row(session, user_id, entry_id))


def edit_entry(session: Session, user_id: str, entry_id: str, summary: str) -> LogEntryInfo:
    """The owner corrects an entry's summary: it is the owner's word from then on."""
    row = _row(session, user_id, entry_id)
    row.summary = _clean(summary)
    row.trust = "owner"
    session.flush()
    return _info(row)


def delete_entry(session: Session, user_id: str, entry_id: str) -> None:
    """Delete an entry."""
    session.delete(_row(session, user_id, entry_id))
    session.flush()


def recent_entries(
    session: Session, user_id: str, limit: int = 50, include_archived: bool = False
) -> list[LogEntryInfo]:
    """The user's newest entries, newest first."""
    query = select(WorkLogEntry).where(WorkLogEntry.user_id == user_id)
    if not include_archived:
        query = query.where(WorkLogEntry.archived_at.is_(None))
    query = query.order_by(WorkLogEntry.created_at.desc(), WorkLogEntry.id.desc()).limit(limit)
    return [_info(row) for row in session.scalars(query)]


def entries_by_id(session: Session, user_id: str, ids: Iterable[str]) -> list[LogEntryInfo]:
    """The user's live entries among `ids`, in no particular order."""
    wanted = list(set(ids))
    if not wanted:
        return []
    rows = session.scalars(
        select(WorkLogEntry).where(
            WorkLogEntry.user_id == user_id,
            WorkLogEntry.id.in_(wanted),
            WorkLogEntry.archived_at.is_(None),
        )
    )
    return [_info(row) for row in rows]


def mark_used(session: Session, user_id: str, entry_ids: Iterable[str]) -> None:
    """Count a use of each entry (used entries are never archived for disuse)."""
    ids = list(set(entry_ids))
    if ids:
        session.execute(
            update(WorkLogEntry)
            .where(WorkLogEntry.user_id == user_id, WorkLogEntry.id.in_(ids))
            .values(use_count=WorkLogEntry.use_count + 1, last_used_at=utcnow())
        )
