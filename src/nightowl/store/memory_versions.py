"""Every change to memory, and undoing it: profile facts, skills, notes and routines.

Each write of a fact, skill or note (by the owner, a tool in a turn, the memory pass, or
upkeep that archives unused facts) records a version in the same transaction: the item's
state before and after (None: it did not exist), the author, the turn, conversation and
message it came from, and that source's trust. How often a fact is used is not content and is
not versioned.

A revert puts an item back as it was before a change, and is itself a version (so it can be
reverted in turn). It refuses, naming the later change, when the item changed since: undo
the later change first (nothing is overwritten silently). Reverting a turn or a message
reverts every change it made, newest first, all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import DateTime, select
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.memory_tables import MemoryFact, MemoryNote, MemoryVersion, Skill
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Routine, User, UtcDateTime, utcnow

Item = MemoryFact | MemoryNote | Skill | Routine
KINDS: dict[str, type[Item]] = {
    "fact": MemoryFact,
    "skill": Skill,
    "note": MemoryNote,
    "routine": Routine,
}
# How much an item is used, and a routine's run state (when it last fired, how far its due
# times are accounted for, what its watch saw): not content, not versioned, not reverted.
USAGE = frozenset({"last_used_at", "use_count", "last_fired_at", "accounted_until", "watch_state"})
AUTHORS = ("owner", "agent", "memory_pass", "upkeep")


@dataclass(frozen=True)
class Author:
    """Who changed memory, and from what: the turn, conversation and message, and the trust
    of that source."""

    who: str = "agent"
    turn_id: str | None = None
    conversation_id: str | None = None
    message_id: str | None = None
    trust: str = "agent"


OWNER = Author("owner", trust="owner")


@dataclass(frozen=True)
class Version:
    """One recorded change."""

    id: int
    kind: str
    item_id: str
    action: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    author: str
    turn_id: str | None
    conversation_id: str | None
    message_id: str | None
    trust: str
    created_at: datetime
    reverted_by: int | None


def _info(row: MemoryVersion) -> Version:
    return view_of(Version, row)


def snapshot(row: Item) -> dict[str, Any]:
    """The item's content as stored (timestamps as ISO text), without its usage counts."""
    state: dict[str, Any] = {}
    for column in row.__table__.columns:
        if column.name in USAGE:
            continue
        value = getattr(row, column.key)
        state[column.name] = value.isoformat() if isinstance(value, datetime) else value
    return state


def record(
    session: Session,
    kind: str,
    item_id: str,
    user_id: str,
    action: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    by: Author,
) -> MemoryVersion:
    """Record one change (in the caller's transaction)."""
    row = MemoryVersion(
        user_id=user_id,
        kind=kind,
        item_id=item_id,
        action=action,
        before=before,
        after=after,
        author=by.who,
        turn_id=by.turn_id,
        conversation_id=by.conversation_id,
        message_id=by.message_id,
        trust=by.trust,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def remove_recorded(
    session: Session, kind: str, row: Item, user_id: str, by: Author = OWNER
) -> None:
    """Delete an item, its last state kept as a version (a revert brings it back)."""
    item_id, before = row.id, snapshot(row)
    session.delete(row)
    session.flush()
    record(session, kind, item_id, user_id, "removed", before, None, by)


def history(
    session: Session,
    user_id: str,
    *,
    item_id: str | None = None,
    turn_id: str | None = None,
    limit: int = 200,
) -> list[Version]:
    """The user's memory changes, newest first (of one item, or of one turn)."""
    query = select(MemoryVersion).where(MemoryVersion.user_id == user_id)
    if item_id is not None:
        query = query.where(MemoryVersion.item_id == item_id)
    if turn_id is not None:
        query = query.where(MemoryVersion.turn_id == turn_id)
    rows = session.scalars(query.order_by(MemoryVersion.id.desc()).limit(limit))
    return [_info(row) for row in rows]


# Whether a fact of `chars` characters fits the user's profile, in place of one of
# `replacing` characters (memory/facts.py: `room_for`; the memory layer owns the bounds).
RoomFor = Callable[[Session, str, int, int], bool]


def _check_restorable(
    session: Session,
    kind: str,
    item_id: str,
    row: Item | None,
    state: dict[str, Any],
    room_for: RoomFor | None,
) -> None:
    """Refuse (Invalid) a restore a normal write would refuse: a skill name taken since, a
    routine whose conversation is gone, a fact that no longer fits the profile."""
    user_id = str(state.get("user_id") or state.get("owner_id"))
    if kind == "skill":
        taken = session.scalar(
            select(Skill.id).where(
                Skill.user_id == user_id, Skill.name == state.get("name"), Skill.id != item_id
            )
        )
        if taken is not None:
            raise Invalid(
                f"a skill named {state.get('name')!r} exists now ({taken}): rename or delete it "
                "first"
            )
    if kind == "routine" and session.get(Conversation, state.get("conversation_id")) is None:
        raise Invalid(f"routine {item_id}'s conversation was deleted; it cannot come back")
    if kind == "fact" and state.get("archived_at") is None and room_for is not None:
        live = isinstance(row, MemoryFact) and row.archived_at is None
        replacing = len(row.text) if live and isinstance(row, MemoryFact) else 0
        if not room_for(session, user_id, len(str(state.get("text") or "")), replacing):
            raise Invalid(
                f"the profile has no room to bring fact {item_id} back: remove or shorten a "
                "fact first"
            )


def _restore(
    session: Session,
    kind: str,
    item_id: str,
    state: dict[str, Any] | None,
    room_for: RoomFor | None = None,
) -> None:
    """Put the item in `state` (None: delete it); usage counts stay as they are."""
    table = KINDS[kind]
    row = cast("Item | None", session.get(table, item_id))
    if state is None:
        if row is not None:
            session.delete(row)
        session.flush()
        return
    _check_restorable(session, kind, item_id, row, state, room_for)
    was_active = isinstance(row, Routine) and row.status == "active"
    if row is None:
        row = table()
        session.add(row)
    for column in table.__table__.columns:
        if column.name in USAGE or column.name not in state:
            continue
        value = state[column.name]
        if isinstance(value, str) and isinstance(column.type, UtcDateTime | DateTime):
            value = datetime.fromisoformat(value)
        setattr(row, column.key, value)
    if isinstance(row, Routine) and row.status == "active" and not was_active:
        # Active again (or anew): its due times count from now, as an approval's do
        # (store/routines.py `set_status`), so a revert never fires a catch-up for a time it
        # was paused, pending or gone.
        row.accounted_until = utcnow()
    session.flush()


def _current(session: Session, kind: str, item_id: str) -> dict[str, Any] | None:
    row = cast("Item | None", session.get(KINDS[kind], item_id))
    return snapshot(row) if row is not None else None


def _latest(session: Session, change: MemoryVersion) -> MemoryVersion:
    newest = session.scalar(
        select(MemoryVersion)
        .where(
            MemoryVersion.user_id == change.user_id,
            MemoryVersion.kind == change.kind,
            MemoryVersion.item_id == change.item_id,
        )
        .order_by(MemoryVersion.id.desc())
        .limit(1)
    )
    assert newest is not None
    return newest


def _undo(
    session: Session, change: MemoryVersion, room_for: RoomFor | None = None
) -> MemoryVersion:
    if change.reverted_by is not None:
        raise Invalid(f"change {change.id} was reverted already (by change {change.reverted_by})")
    # Later changes that were reverted leave the item as this change left it; the state is
    # what decides.
    if _current(session, change.kind, change.item_id) != change.after:
        newest = _latest(session, change)
        raise Invalid(
            f"the {change.kind} {change.item_id} changed after change {change.id} (change "
            f"{newest.id}, {newest.action} by {newest.author}): revert that one first"
        )
    _restore(session, change.kind, change.item_id, change.before, room_for)
    undone = record(
        session,
        change.kind,
        change.item_id,
        change.user_id,
        "reverted",
        change.after,
        change.before,
        Author("owner", trust="owner"),
    )
    change.reverted_by = undone.id
    if change.action == "reverted":  # undoing a revert: the change it undid stands again
        for redone in session.scalars(
            select(MemoryVersion).where(MemoryVersion.reverted_by == change.id)
        ):
            redone.reverted_by = None
    session.flush()
    return undone


def _lock(session: Session, user_id: str) -> None:
    """On PostgreSQL, writers of one user's memory queue on the user's row (as the profile's
    bounds do), so a revert's check and its write see no change in between."""
    session.execute(select(User.id).where(User.id == user_id).with_for_update())


def revert_change(
    session: Session, user_id: str, version_id: int, room_for: RoomFor | None = None
) -> Version:
    """Put an item back as it was before one change (Invalid when it changed since, or a
    normal write would refuse the state it had)."""
    _lock(session, user_id)
    change = session.get(MemoryVersion, version_id)
    if change is None or change.user_id != user_id:
        raise NotFound(f"no memory change {version_id}")
    with session.begin_nested():
        return _info(_undo(session, change, room_for))


def revert_source(
    session: Session,
    user_id: str,
    *,
    turn_id: str | None = None,
    message_id: str | None = None,
    room_for: RoomFor | None = None,
) -> list[Version]:
    """Revert every change one turn (or one message) made, newest first, all or nothing
    (Invalid, with nothing changed, when an item changed since or nothing is there)."""
    if (turn_id is None) == (message_id is None):
        raise Invalid("give a turn or a message whose memory changes to revert")
    _lock(session, user_id)
    query = select(MemoryVersion).where(
        MemoryVersion.user_id == user_id,
        MemoryVersion.reverted_by.is_(None),
        MemoryVersion.action != "reverted",
    )
    if turn_id is not None:
        query = query.where(MemoryVersion.turn_id == turn_id)
    else:
        query = query.where(MemoryVersion.message_id == message_id)
    changes = list(session.scalars(query.order_by(MemoryVersion.id.desc())))
    if not changes:
        named = f"turn {turn_id}" if turn_id is not None else f"message {message_id}"
        raise Invalid(f"{named} made no memory change that is not reverted already")
    # A savepoint: a refusal part-way leaves nothing undone, whatever the caller does next.
    with session.begin_nested():
        return [_info(_undo(session, change, room_for)) for change in changes]
