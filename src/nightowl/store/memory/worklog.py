"""The work log in the store: one entry per turn, read newest first and counted when used."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from nightowl.store.ids import new_id
from nightowl.store.memory.owned import owned_item
from nightowl.store.memory_tables import WorkLogEntry
from nightowl.store.row_views import view_of
from nightowl.store.tables import utcnow


@dataclass(frozen=True)
class LogEntryInfo:
    """A work-log entry."""

    id: str
    conversation_id: str | None
    turn_id: str | None
    summary: str
    created_at: datetime
    last_used_at: datetime | None
    use_count: int
    archived: bool
    trust: str  # memory-trust: owner | member | untrusted (made from outside text)


def _info(row: WorkLogEntry) -> LogEntryInfo:
    return view_of(LogEntryInfo, row, archived=row.archived_at is not None)


def entry_of_turn(session: Session, turn_id: str) -> LogEntryInfo | None:
    """The entry a turn wrote, if it wrote one."""
    found = session.scalar(_ENTRY_OF_TURN, {"turn_id": turn_id})
    return None if found is None else _info(found)


_ENTRY_OF_TURN = select(WorkLogEntry).where(WorkLogEntry.turn_id == bindparam("turn_id"))


def insert_entry(
    session: Session,
    user_id: str,
    summary: str,
    conversation_id: str | None,
    turn_id: str | None,
    trust: str,
) -> LogEntryInfo:
    """Store a new entry (its summary checked already)."""
    row = WorkLogEntry(
        id=new_id("log"),
        user_id=user_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        summary=summary,
        trust=trust,
        created_at=utcnow(),
        use_count=0,
    )
    session.add(row)
    session.flush()
    return _info(row)


def _row(session: Session, user_id: str, entry_id: str) -> WorkLogEntry:
    return owned_item(session, WorkLogEntry, entry_id, user_id, f"no work-log entry {entry_id}")


def get_entry(session: Session, user_id: str, entry_id: str) -> LogEntryInfo:
    """One of the user's entries (NotFound for anyone else's)."""
    return _info(_row(session, user_id, entry_id))


def update_entry_summary(
    session: Session, user_id: str, entry_id: str, summary: str
) -> LogEntryInfo:
    """The owner's summary (checked already) replaces the entry's: it is the owner's word
    from then on."""
    row = _row(session, user_id, entry_id)
    row.summary = summary
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
    if not include_archived:  # every turn's memory note reads them: prebuilt
        found = session.scalars(_RECENT_LIVE, {"user_id": user_id, "limit": limit})
        return [_info(row) for row in found]
    query = select(WorkLogEntry).where(WorkLogEntry.user_id == user_id)
    query = query.order_by(WorkLogEntry.created_at.desc(), WorkLogEntry.id.desc()).limit(limit)
    return [_info(row) for row in session.scalars(query)]


_RECENT_LIVE = (
    select(WorkLogEntry)
    .where(WorkLogEntry.user_id == bindparam("user_id"), WorkLogEntry.archived_at.is_(None))
    .order_by(WorkLogEntry.created_at.desc(), WorkLogEntry.id.desc())
    .limit(bindparam("limit"))
)


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
        session.execute(_MARK_USED, {"_user": user_id, "_ids": ids, "_now": utcnow()})


# Prebuilt: every turn's memory note runs it.
_MARK_USED = (
    update(WorkLogEntry)
    .where(
        # Not named after columns: an UPDATE reserves those names for its SET clause.
        WorkLogEntry.user_id == bindparam("_user"),
        WorkLogEntry.id.in_(bindparam("_ids", expanding=True)),
    )
    .values(use_count=WorkLogEntry.use_count + 1, last_used_at=bindparam("_now"))
    .execution_options(synchronize_session=False)
)


def archive_unused_entries(session: Session, cutoff: datetime, now: datetime) -> int:
    """Archive every live entry not used (or, never used, not written) since `cutoff`; how
    many were."""
    result = session.execute(
        update(WorkLogEntry)
        .where(
            WorkLogEntry.archived_at.is_(None),
            func.coalesce(WorkLogEntry.last_used_at, WorkLogEntry.created_at) < cutoff,
        )
        .values(archived_at=now)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
