"""Profile facts: at most 100 live facts and 4,000 characters per user, enforced here.

A write that would pass a bound raises `ProfileFull`; nothing is ever cut to fit. Archived
facts leave the profile (and the bounds) but stay searchable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from nightowl.safety.policy import SECRET_REF
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.memory_tables import MemoryFact
from nightowl.store.memory_versions import OWNER, Author, record, snapshot
from nightowl.store.tables import User, utcnow

MAX_FACTS = 100
MAX_PROFILE_CHARS = 4_000
MAX_FACT_CHARS = 500
TRUST_LEVELS = ("owner", "member", "untrusted")


class ProfileFull(Invalid):
    """Adding or growing a fact would pass the profile's bounds."""


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
    user_id: str
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
    return FactInfo(
        row.id,
        row.user_id,
        row.text,
        row.trust,
        row.source_conversation_id,
        row.source_message_id,
        row.source_turn_id,
        row.created_by,
        row.created_at,
        row.updated_at,
        row.last_used_at,
        row.use_count,
        row.archived_at is not None,
    )


NO_SECRETS = (
    "a fact may not hold a secret reference ({{secret:NAME}}): memory is shown in prompts, "
    "so name the secret without the braces"
)


def clean_text(text: str) -> str:
    """A fact's text on one line, checked for length (Invalid with what to do)."""
    cleaned = " ".join(text.split())
    if not cleaned:
        raise Invalid("a fact needs some text")
    if len(cleaned) > MAX_FACT_CHARS:
        raise Invalid(
            f"a fact is at most {MAX_FACT_CHARS} characters (this one has {len(cleaned)}); "
            "say it shorter or split it"
        )
    if SECRET_REF.search(cleaned):
        raise Invalid(NO_SECRETS)
    return cleaned


def profile_size(session: Session, user_id: str) -> tuple[int, int]:
    """(live facts, characters) of the user's profile."""
    count, chars = session.execute(
        select(
            func.count(MemoryFact.id), func.coalesce(func.sum(func.length(MemoryFact.text)), 0)
        ).where(MemoryFact.user_id == user_id, MemoryFact.archived_at.is_(None))
    ).one()
    return int(count), int(chars)


def room_for(session: Session, user_id: str, chars: int, replacing: int = 0) -> bool:
    """Whether a fact of `chars` characters fits (in place of one of `replacing` characters)."""
    count, used = profile_size(session, user_id)
    new_count = count if replacing else count + 1
    return new_count <= MAX_FACTS and used - replacing + chars <= MAX_PROFILE_CHARS


def _check_room(session: Session, user_id: str, chars: int, replacing: int = 0) -> None:
    # On PostgreSQL, concurrent writers of one profile queue on the user's row, so two of
    # them cannot both see room for one more fact (SQLite has one writer at a time anyway).
    session.execute(select(User.id).where(User.id == user_id).with_for_update())
    if not room_for(session, user_id, chars, replacing):
        count, used = profile_size(session, user_id)
        raise ProfileFull(
            f"the profile is full ({count} of {MAX_FACTS} facts, {used} of "
            f"{MAX_PROFILE_CHARS} characters); remove or shorten a fact first"
        )


def author_of(source: Source | None, who: str) -> Author:
    """The author of a change, from where the fact came from."""
    if source is None:
        return Author(who, trust="owner" if who == "owner" else "agent")
    return Author(who, source.turn_id, source.conversation_id, source.message_id, source.trust)


def add_fact(
    session: Session,
    user_id: str,
    text: str,
    source: Source,
    created_by: str = "agent",
    *,
    by: Author | None = None,
) -> FactInfo:
    """Add a fact to the user's profile (ProfileFull when it would not fit); a version
    records it (`by`: who, from what; by default the creator and the source)."""
    if source.trust not in TRUST_LEVELS:
        raise Invalid(f"trust must be one of {', '.join(TRUST_LEVELS)}")
    cleaned = clean_text(text)
    _check_room(session, user_id, len(cleaned))
    now = utcnow()
    row = MemoryFact(
        id=new_id("fact"),
        user_id=user_id,
        text=cleaned,
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
    by = by or author_of(source, created_by)
    record(session, "fact", row.id, user_id, "added", None, snapshot(row), by)
    return _info(row)


def _row(session: Session, user_id: str, fact_id: str) -> MemoryFact:
    row = session.get(MemoryFact, fact_id)
    if row is None or row.user_id != user_id:
        raise NotFound(f"no fact {fact_id}")
    return row


def get_fact(session: Session, user_id: str, fact_id: str) -> FactInfo:
    """One of the user's facts (NotFound for anyone else's)."""
    return _info(_row(session, user_id, fact_id))


def replace_fact(
    session: Session,
    user_id: str,
    fact_id: str,
    text: str,
    source: Source | None = None,
    *,
    by: Author | None = None,
) -> FactInfo:
    """Rewrite a fact; a new source (and its trust) replaces the old one when given. The
    version keeps what it said before (`by`: by default the owner for an owner's source)."""
    row = _row(session, user_id, fact_id)
    before = snapshot(row)
    cleaned = clean_text(text)
    if row.archived_at is None:
        _check_room(session, user_id, len(cleaned), replacing=len(row.text))
    row.text = cleaned
    row.updated_at = utcnow()
    if source is not None:
        row.trust = source.trust
        row.source_conversation_id = source.conversation_id
        row.source_message_id = source.message_id
        row.source_turn_id = source.turn_id
    session.flush()
    owners = source is not None and source.trust == "owner" and not source.turn_id
    by = by or author_of(source, "owner" if owners else "agent")
    record(session, "fact", fact_id, user_id, "changed", before, snapshot(row), by)
    return _info(row)


def remove_fact(session: Session, user_id: str, fact_id: str, *, by: Author = OWNER) -> FactInfo:
    """Delete a fact (its versions keep what it said: a revert brings it back); returns
    what it was."""
    row = _row(session, user_id, fact_id)
    info, before = _info(row), snapshot(row)
    session.delete(row)
    session.flush()
    record(session, "fact", fact_id, user_id, "removed", before, None, by)
    return info


def set_archived(
    session: Session, user_id: str, fact_id: str, archived: bool, *, by: Author = OWNER
) -> FactInfo:
    """Archive a fact (out of the profile, still searchable) or bring it back (if it fits)."""
    row = _row(session, user_id, fact_id)
    before = snapshot(row)
    if archived and row.archived_at is None:
        row.archived_at = utcnow()
    elif not archived and row.archived_at is not None:
        _check_room(session, user_id, len(row.text))
        row.archived_at = None
    else:
        return _info(row)
    session.flush()
    action = "archived" if archived else "restored"
    record(session, "fact", fact_id, user_id, action, before, snapshot(row), by)
    return _info(row)


def list_facts(session: Session, user_id: str, include_archived: bool = False) -> list[FactInfo]:
    """The user's facts, oldest first (the profile's order)."""
    query = select(MemoryFact).where(MemoryFact.user_id == user_id)
    if not include_archived:
        query = query.where(MemoryFact.archived_at.is_(None))
    rows = session.scalars(query.order_by(MemoryFact.created_at, MemoryFact.id))
    return [_info(row) for row in rows]


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
