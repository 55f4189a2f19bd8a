"""Profile facts in the store: rows in, `FactInfo` out, each change recorded as a version.

The profile's bounds are checked by memory/facts.py before it calls these.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from nightowl.store.ids import new_id
from nightowl.store.memory.owned import owned_item
from nightowl.store.memory_tables import MemoryFact
from nightowl.store.memory_versions import Author, record, remove_recorded, snapshot
from nightowl.store.row_views import view_of
from nightowl.store.tables import User, utcnow


@dataclass(frozen=True)
class Source:
    """Where a fact came from: conversation, message, turn, and that content's trust."""

    trust: str = "owner"
    conversation_id: str | None = None
    message_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True)
class FactInfo:
    """A profile fact as the owner, the prompt and the memory pass see it."""

    id: str
    text: str
    trust: str
    source_conversation_id: str | None
    source_message_id: str | None
    source_turn_id: str | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime | None
    use_count: int
    archived: bool


def _info(row: MemoryFact) -> FactInfo:
    return view_of(FactInfo, row, archived=row.archived_at is not None)


def profile_size(session: Session, user_id: str) -> tuple[int, int]:
    """(live facts, characters) of the user's profile."""
    count, chars = session.execute(
        select(
            func.count(MemoryFact.id), func.coalesce(func.sum(func.length(MemoryFact.text)), 0)
        ).where(MemoryFact.user_id == user_id, MemoryFact.archived_at.is_(None))
    ).one()
    return int(count), int(chars)


def lock_profile(session: Session, user_id: str) -> None:
    """Hold the user's row until the transaction ends: on PostgreSQL, concurrent writers of
    one profile queue here, so two of them cannot both see room for one more fact (SQLite
    has one writer at a time anyway)."""
    session.execute(select(User.id).where(User.id == user_id).with_for_update())


def insert_fact(
    session: Session, user_id: str, text: str, source: Source, created_by: str, by: Author
) -> FactInfo:
    """Store a new fact (its text checked already); a version records it."""
    now = utcnow()
    row = MemoryFact(
        id=new_id("fact"),
        user_id=user_id,
        text=text,
        trust=source.trust,
        source_conversation_id=source.conversation_id,
        source_message_id=source.message_id,
        source_turn_id=source.turn_id,
        created_by=created_by,
        created_at=now,
        updated_at=now,
        use_count=0,
    )
    session.add(row)
    session.flush()
    record(session, "fact", row.id, user_id, "added", None, snapshot(row), by)
    return _info(row)


def _row(session: Session, user_id: str, fact_id: str) -> MemoryFact:
    return owned_item(session, MemoryFact, fact_id, user_id, f"no fact {fact_id}")


def get_fact(session: Session, user_id: str, fact_id: str) -> FactInfo:
    """One of the user's facts (NotFound for anyone else's)."""
    return _info(_row(session, user_id, fact_id))


def update_fact(
    session: Session,
    user_id: str,
    fact_id: str,
    text: str,
    source: Source | None,
    by: Author,
) -> FactInfo:
    """Rewrite a fact (its text checked already); a new source (and its trust) replaces the
    old one when given. The version keeps what it said before."""
    row = _row(session, user_id, fact_id)
    before = snapshot(row)
    row.text = text
    row.updated_at = utcnow()
    if source is not None:
        row.trust = source.trust
        row.source_conversation_id = source.conversation_id
        row.source_message_id = source.message_id
        row.source_turn_id = source.turn_id
    session.flush()
    record(session, "fact", fact_id, user_id, "changed", before, snapshot(row), by)
    return _info(row)


def delete_fact(session: Session, user_id: str, fact_id: str, by: Author) -> FactInfo:
    """Delete a fact (its versions keep what it said: a revert brings it back); returns
    what it was."""
    row = _row(session, user_id, fact_id)
    info = _info(row)
    remove_recorded(session, "fact", row, user_id, by)
    return info


def set_fact_archived(
    session: Session, user_id: str, fact_id: str, archived: bool, by: Author
) -> FactInfo:
    """Archive a fact or bring it back (a version records the change; none if it already
    was so)."""
    row = _row(session, user_id, fact_id)
    if archived == (row.archived_at is not None):
        return _info(row)
    before = snapshot(row)
    row.archived_at = utcnow() if archived else None
    session.flush()
    action = "archived" if archived else "restored"
    record(session, "fact", fact_id, user_id, action, before, snapshot(row), by)
    return _info(row)


def archive_unused_facts(session: Session, cutoff: datetime, now: datetime, by: Author) -> int:
    """Archive every live fact not used (or, never used, not changed) since `cutoff`, each
    recorded as a version (a revert brings it back); how many were."""
    stale = session.scalars(
        select(MemoryFact).where(
            MemoryFact.archived_at.is_(None),
            func.coalesce(MemoryFact.last_used_at, MemoryFact.updated_at) < cutoff,
        )
    ).all()
    for fact in stale:
        before = snapshot(fact)
        fact.archived_at = now
        session.flush()
        record(session, "fact", fact.id, fact.user_id, "archived", before, snapshot(fact), by)
    return len(stale)


def list_facts(session: Session, user_id: str, include_archived: bool = False) -> list[FactInfo]:
    """The user's facts, oldest first (the profile's order)."""
    if include_archived:
        query = select(MemoryFact).where(MemoryFact.user_id == user_id)
        rows = session.scalars(query.order_by(MemoryFact.created_at, MemoryFact.id))
    else:  # every model call's profile reads them: prebuilt
        rows = session.scalars(_LIVE_FACTS, {"user_id": user_id})
    return [_info(row) for row in rows]


_LIVE_FACTS = (
    select(MemoryFact)
    .where(MemoryFact.user_id == bindparam("user_id"), MemoryFact.archived_at.is_(None))
    .order_by(MemoryFact.created_at, MemoryFact.id)
)


def mark_used(session: Session, user_id: str, fact_ids: Iterable[str]) -> None:
    """Count a use of each fact (used facts are never archived for disuse)."""
    ids = list(set(fact_ids))
    if not ids:
        return
    session.execute(
        update(MemoryFact)
        .where(MemoryFact.user_id == user_id, MemoryFact.id.in_(ids))
        .values(use_count=MemoryFact.use_count + 1, last_used_at=utcnow())
    )
