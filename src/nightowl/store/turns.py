"""Turn records: which batch of messages each run of the agent loop took, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import bindparam, case, func, insert, or_, select, update
from sqlalchemy.orm import Session

from nightowl.store.changes import Change, record_change
from nightowl.store.conversations import MessageInfo
from nightowl.store.errors import NotFound
from nightowl.store.helper_agents import surface_of
from nightowl.store.ids import new_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Message, Trigger, Turn, utcnow


@dataclass(frozen=True)
class TurnInfo:
    """A turn's identity and state."""

    id: str
    conversation_id: str
    status: str
    priority: int
    batch_first_seq: int | None
    batch_last_seq: int | None


def _info(row: Turn) -> TurnInfo:
    return view_of(TurnInfo, row)


@dataclass(frozen=True)
class HeldTurn:
    """A turn's status, read with its row kept: while the caller refers to this, the
    session's identity map serves later reads of the turn in the same transaction (a budget
    check, a helper's guidance) without asking the database again."""

    status: str | None  # None: no such turn
    row: Turn | None


def hold_turn(session: Session, turn_id: str) -> HeldTurn:
    """The turn's status, its row held for the rest of the transaction (see HeldTurn)."""
    row = session.get(Turn, turn_id)
    return HeldTurn(row.status if row is not None else None, row)


def lock_conversation(session: Session, conversation_id: str) -> None:
    """Serialise writers of one conversation until the transaction ends."""
    # SQLite's BEGIN IMMEDIATE already serialises writers; PostgreSQL needs the row lock.
    if session.get_bind().dialect.name == "postgresql":
        session.connection().execute(_LOCK_CONVERSATION, {"conversation_id": conversation_id})


# Prebuilt (Core, on the session's connection): every turn runs these; a statement built per
# call costs three to five times the CPU of running a prebuilt one (docs/operations.md).
_LOCK_CONVERSATION = (
    select(Conversation.id).where(Conversation.id == bindparam("conversation_id")).with_for_update()
)


_INSERT_TURN = insert(Turn)
_RUNNING = select(Turn.id).where(
    Turn.conversation_id == bindparam("conversation_id"), Turn.status == "running"
)


def queue_turn(session: Session, conversation_id: str, priority: int) -> tuple[TurnInfo, bool]:
    """The conversation's waiting turn (one at least as urgent), or a new one; True when new.

    Call it in the transaction that stored the new message: a waiting turn has not yet taken
    its batch, so it takes this message too.
    """
    lock_conversation(session, conversation_id)
    return queue_turns(session, {conversation_id: {priority}})[(conversation_id, priority)]


def queue_turns(
    session: Session, wanted: dict[str, set[int]]
) -> dict[tuple[str, int], tuple[TurnInfo, bool]]:
    """Per (conversation, priority), the waiting turn at least as urgent, or a new one (True
    when new), for several conversations at once (one read, one insert), their rows already
    locked. Only a turn at least as urgent will do: the owner's message must not join a group
    or webhook turn still sitting out its batching window. The most urgent of a conversation
    goes first, so a less urgent arrival joins the turn just made for a more urgent one."""
    connection = session.connection()
    waiting: dict[str, list[TurnInfo]] = {conversation: [] for conversation in wanted}
    for row in connection.execute(
        select(Turn.id, Turn.conversation_id, Turn.priority).where(
            Turn.conversation_id.in_(sorted(wanted)), Turn.status == "queued"
        )
    ):
        waiting[row.conversation_id].append(
            TurnInfo(row.id, row.conversation_id, "queued", row.priority, None, None)
        )
    found: dict[tuple[str, int], tuple[TurnInfo, bool]] = {}
    new_rows: list[dict[str, object]] = []
    now = utcnow()
    for conversation, priorities in wanted.items():
        for priority in sorted(priorities):
            fits = [t for t in waiting[conversation] if t.priority <= priority]
            if fits:
                found[(conversation, priority)] = (min(fits, key=lambda t: t.priority), False)
                continue
            turn = TurnInfo(new_id("turn"), conversation, "queued", int(priority), None, None)
            waiting[conversation].append(turn)
            found[(conversation, priority)] = (turn, True)
            new_rows.append(
                {
                    "id": turn.id,
                    "conversation_id": conversation,
                    "status": "queued",
                    "priority": turn.priority,
                    "created_at": now,
                    "activity": "",
                }
            )
    if new_rows:
        connection.execute(_INSERT_TURN, new_rows)
    return found


def claim_batch(session: Session, turn_id: str) -> list[MessageInfo]:
    """Mark the turn running and give it every message no turn has taken yet.

    That is every user message, and every runtime notice (a timer firing) not sent by a turn.

    Safe to repeat: a replay returns the same batch (messages already tagged with this turn).
    """
    turn = session.get(Turn, turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id!r}")
    lock_conversation(session, turn.conversation_id)
    found = session.execute(
        _UNTAKEN_MESSAGES, {"conversation_id": turn.conversation_id, "turn_id": turn_id}
    )
    batch = [MessageInfo(**row._asdict()) for row in found]
    untaken = [m.id for m in batch if m.turn_id is None]
    # One statement for the whole batch (a webhook storm can bring hundreds of messages).
    for start in range(0, len(untaken), 500):
        session.execute(
            update(Message)
            .where(Message.id.in_(untaken[start : start + 500]))
            .values(turn_id=turn_id)
            .execution_options(synchronize_session=False)
        )
    if turn.status == "queued":
        turn.status = "running"
        turn.started_at = utcnow()
    if batch:
        turn.batch_first_seq = batch[0].seq
        turn.batch_last_seq = batch[-1].seq
    session.flush()
    return [replace(m, turn_id=turn_id) for m in batch]


_UNTAKEN_MESSAGES = (
    select(*(getattr(Message, f) for f in MessageInfo.__dataclass_fields__))
    .where(
        Message.conversation_id == bindparam("conversation_id"),
        or_(Message.role == "user", Message.role == "notice"),
        or_(Message.turn_id.is_(None), Message.turn_id == bindparam("turn_id")),
    )
    .order_by(Message.seq)
)


def finish_turn(session: Session, turn_id: str, *, status: str, error: str | None = None) -> None:
    """Record how the turn ended (`done` or `failed`)."""
    session.execute(
        update(Turn)
        .where(Turn.id == turn_id)
        .values(status=status, error=error, finished_at=utcnow(), activity="", waiting_on=None)
    )
    _announce_activity(session, turn_id)


def count_start(session: Session, turn_id: str) -> int:
    """Count a start of the turn's workflow; how many starts since it last made progress.

    A turn that was waiting for an answer did not die while it ran: its count starts afresh.
    """
    session.flush()  # Core on the session's connection: what the session holds goes first
    found = session.connection().scalar(_COUNT_START, {"turn_id": turn_id})
    return int(found or 0)


# One statement (not a read and an ORM flush): every start of every turn runs it.
_COUNT_START = (
    update(Turn)
    .where(Turn.id == bindparam("turn_id"))
    .values(
        starts_without_progress=case(
            (Turn.waiting_on.is_not(None), 1), else_=Turn.starts_without_progress + 1
        )
    )
    .returning(Turn.starts_without_progress)
)


def note_progress(session: Session, turn_id: str) -> None:
    """The turn finished a step in this run: a later death is not part of a crash loop."""
    session.execute(update(Turn).where(Turn.id == turn_id).values(starts_without_progress=0))


def park_turn(session: Session, turn_id: str, reason: str) -> str | None:
    """Mark a turn that keeps killing its process as failed (only one still queued or
    running); its conversation's id, or None when there was nothing to park."""
    row = session.get(Turn, turn_id)
    if row is None or row.status not in ("queued", "running"):
        return None
    row.status, row.error, row.finished_at = "failed", reason, utcnow()
    row.activity, row.waiting_on = "", None
    session.flush()
    _announce_activity(session, turn_id)
    return row.conversation_id


def get_turn(session: Session, turn_id: str) -> TurnInfo:
    """One turn by id."""
    row = session.get(Turn, turn_id)
    if row is None:
        raise NotFound(f"no turn {turn_id!r}")
    return _info(row)


def turns_of(session: Session, conversation_id: str) -> list[TurnInfo]:
    """Every turn of a conversation, oldest first."""
    rows = session.scalars(
        select(Turn).where(Turn.conversation_id == conversation_id).order_by(Turn.created_at)
    )
    return [_info(row) for row in rows]


def waiting_turns(session: Session) -> list[TurnInfo]:
    """Turns still queued (used at start-up to re-enqueue any whose enqueue was lost)."""
    return [_info(row) for row in session.scalars(select(Turn).where(Turn.status == "queued"))]


def queue_depth(session: Session) -> dict[int, int]:
    """How many turns wait, by priority."""
    rows = session.execute(
        select(Turn.priority, func.count()).where(Turn.status == "queued").group_by(Turn.priority)
    )
    return {priority: count for priority, count in rows}


def has_waiting_turns(session: Session) -> bool:
    """Whether any turn, of any conversation, waits to be dispatched (queued, not running)."""
    found = session.execute(select(Turn.id).where(Turn.status == "queued").limit(1)).first()
    return found is not None


def running_turn_ids(session: Session, conversation_id: str) -> list[str]:
    """Turns of the conversation marked running (the one a correction must cut off)."""
    return list(session.connection().scalars(_RUNNING, {"conversation_id": conversation_id}))


def other_running_turns(session: Session, turn_id: str) -> list[str]:
    """Turns of this turn's conversation, other than it, marked running (one statement)."""
    return list(session.connection().scalars(_OTHERS_RUNNING, {"turn_id": turn_id}))


_OTHERS_RUNNING = select(Turn.id).where(
    Turn.conversation_id
    == select(Turn.conversation_id).where(Turn.id == bindparam("turn_id")).scalar_subquery(),
    Turn.status == "running",
    Turn.id != bindparam("turn_id"),
)


def cut_off_turns(session: Session, conversation_id: str, except_turn: str) -> list[str]:
    """Earlier turns left running or preempted: interrupted, with no record written yet."""
    found = {"conversation_id": conversation_id, "except_turn": except_turn}
    return list(session.scalars(_CUT_OFF, found))


_CUT_OFF = (
    select(Turn.id)
    .where(
        Turn.conversation_id == bindparam("conversation_id"),
        or_(Turn.status == "running", Turn.status == "preempted"),
        Turn.id != bindparam("except_turn"),
    )
    .order_by(Turn.created_at)
)


def mark_preempted(session: Session, turn_id: str) -> None:
    """The turn's task stopped because the owner cut in (only if it is still marked running)."""
    session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == "running")
        .values(status="preempted", finished_at=utcnow(), activity="", waiting_on=None)
    )
    _announce_activity(session, turn_id)


def mark_preempted_many(session: Session, turn_ids: list[str]) -> None:
    """The owner cut in: these running turns are preempted (a turn on another worker sees it
    at its next step and stops)."""
    if turn_ids:
        session.execute(
            update(Turn)
            .where(Turn.id.in_(turn_ids), Turn.status == "running")
            .values(status="preempted", finished_at=utcnow(), activity="", waiting_on=None)
        )
        for turn_id in turn_ids:
            _announce_activity(session, turn_id)


def mark_interrupted(session: Session, turn_id: str) -> None:
    """The next turn has recorded what this one finished and what was cut off."""
    session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status.in_(("running", "preempted")))
        .values(status="interrupted", finished_at=func.coalesce(Turn.finished_at, utcnow()))
    )


def set_activity(session: Session, turn_id: str, activity: str) -> None:
    """What the turn is doing now, in words for the owner (never the model's own text).

    Clients hear of it through a change notification of kind `activity`, sent only when it
    changes (consecutive steps often say "thinking" again). On PostgreSQL the update returns
    what the notification needs (one round trip, not two: every step runs it); SQLite cannot
    return another table's columns from an UPDATE ... FROM, and its statements cost no trip.
    """
    activity = activity[:200]
    session.flush()  # Core on the session's connection: what the session holds goes first
    connection = session.connection()
    values = {"turn_id": turn_id, "activity": activity}
    if connection.dialect.name == "postgresql":
        row = connection.execute(_SET_ACTIVITY_RETURNING, values).first()
        if row is not None:
            _announce(session, row[0], row[1], int(row[2] or 0), row[3])
    elif connection.execute(_SET_ACTIVITY, values).rowcount:
        _announce_activity(session, turn_id)


# Prebuilt (Core, on the session's connection): every step of every turn runs it.
_SET_ACTIVITY = (
    update(Turn)
    .where(Turn.id == bindparam("turn_id"), Turn.activity != bindparam("activity"))
    .values(activity=bindparam("activity"))
)
_SET_ACTIVITY_RETURNING = (
    update(Turn)
    .where(
        Turn.id == bindparam("turn_id"),
        Turn.activity != bindparam("activity"),
        Conversation.id == Turn.conversation_id,
    )
    .values(activity=bindparam("activity"))
    .returning(
        Turn.conversation_id, Conversation.owner_id, Conversation.last_seq, Conversation.kind
    )
)


def _announce_activity(session: Session, turn_id: str) -> None:
    row = session.execute(
        select(
            Turn.conversation_id, Conversation.owner_id, Conversation.last_seq, Conversation.kind
        )
        .join(Conversation, Conversation.id == Turn.conversation_id)
        .where(Turn.id == turn_id)
    ).first()
    if row is None:
        raise NotFound(f"no turn {turn_id!r}")
    _announce(session, row[0], row[1], int(row[2] or 0), row[3])


def _announce(session: Session, conversation_id: str, owner_id: str, seq: int, kind: str) -> None:
    if kind == "helper":  # a helper's run: its parent conversation shows how it goes
        conversation_id = surface_of(session, conversation_id)
        found = select(Conversation.last_seq).where(Conversation.id == conversation_id)
        seq = int(session.scalar(found) or 0)
    record_change(
        session,
        Change(conversation_id=conversation_id, owner_id=owner_id, seq=seq, kind="activity"),
    )


def activities(session: Session, conversation_ids: list[str]) -> dict[str, str]:
    """The running turn's activity per conversation (conversations at rest are left out)."""
    if not conversation_ids:
        return {}
    rows = session.execute(
        select(Turn.conversation_id, Turn.activity).where(
            Turn.conversation_id.in_(conversation_ids), Turn.status == "running"
        )
    ).all()
    return {row[0]: row[1] or "working" for row in rows}


def note_routine(session: Session, turn_id: str, message_ids: list[str]) -> str | None:
    """Remember on the turn the routine whose firing is among its batch (its spending then
    counts against that routine); the routine's id, or None."""
    if not message_ids:
        return None
    key = session.scalar(_ROUTINE_KEY, {"message_ids": message_ids})
    routine_id = key.split(":", 1)[0] if key else None
    if routine_id is not None:
        session.execute(update(Turn).where(Turn.id == turn_id).values(routine_id=routine_id))
    return routine_id


_ROUTINE_KEY = (
    select(Trigger.idempotency_key)
    .where(Trigger.message_id.in_(bindparam("message_ids", expanding=True)))
    .where(Trigger.source == "routine")
    .limit(1)
)
