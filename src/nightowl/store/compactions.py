"""Compactions, the wakes a conversation has coming (timers, routines), and cache warming."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from croniter import croniter
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from nightowl.store.ids import new_id
from nightowl.store.tables import (
    Compaction,
    Conversation,
    Message,
    ModelCall,
    PromptPinRow,
    Routine,
    Timer,
    TranscriptEntry,
    Turn,
)


@dataclass(frozen=True)
class CompactionInfo:
    """The latest compaction of a conversation."""

    id: str
    through_entry_id: int
    entry: dict[str, Any]
    created_at: datetime


def latest_compaction(session: Session, conversation_id: str) -> CompactionInfo | None:
    """The conversation's most recent compaction, if it was ever compacted."""
    row = session.scalars(
        select(Compaction)
        .where(Compaction.conversation_id == conversation_id)
        .order_by(Compaction.created_at.desc(), Compaction.through_entry_id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return CompactionInfo(row.id, row.through_entry_id, row.entry, row.created_at)


def last_entry_id(session: Session, conversation_id: str) -> int:
    """The id of the conversation's newest transcript entry (0 when it has none)."""
    found = session.scalar(
        select(func.max(TranscriptEntry.id)).where(
            TranscriptEntry.conversation_id == conversation_id
        )
    )
    return int(found or 0)


def is_quiet(session: Session, conversation_id: str, after_turn: str) -> bool:
    """True when nothing happened in the conversation since `after_turn` ended: no other turn
    was created, none is queued or running, and no message waits to be taken."""
    after = session.get(Turn, after_turn)
    if after is None or after.status in ("queued", "running"):
        return False
    newer = session.scalar(
        select(func.count())
        .select_from(Turn)
        .where(
            Turn.conversation_id == conversation_id,
            Turn.id != after_turn,
            (Turn.created_at > after.created_at) | Turn.status.in_(("queued", "running")),
        )
    )
    waiting = session.scalar(
        select(func.count())
        .select_from(Message)
        .where(
            Message.conversation_id == conversation_id,
            Message.role != "agent",
            Message.turn_id.is_(None),
        )
    )
    return not newer and not waiting


def record_compaction(
    session: Session,
    conversation_id: str,
    *,
    through_entry_id: int,
    entry: dict[str, Any],
    model_call_id: str | None,
    tokens_before: int,
) -> str:
    """Keep the compaction and drop the conversation's prompt pin: its next request pins the
    server's current instructions, tools and profile (the new prefix)."""
    compaction_id = new_id("cmp")
    session.add(
        Compaction(
            id=compaction_id,
            conversation_id=conversation_id,
            through_entry_id=through_entry_id,
            entry=entry,
            model_call_id=model_call_id,
            tokens_before=tokens_before,
        )
    )
    session.execute(delete(PromptPinRow).where(PromptPinRow.conversation_id == conversation_id))
    session.flush()
    return compaction_id


def record_timer(
    session: Session, timer_id: str, conversation_id: str, due_at: datetime, note: str
) -> None:
    """Remember a pending timer (once per id: a re-run step does not add it twice)."""
    if session.get(Timer, timer_id) is None:
        session.add(Timer(id=timer_id, conversation_id=conversation_id, due_at=due_at, note=note))


def upcoming_wakes(session: Session, conversation_id: str, now: datetime) -> list[datetime]:
    """When pending timers and active routines will next wake the conversation."""
    wakes = list(
        session.scalars(
            select(Timer.due_at).where(
                Timer.conversation_id == conversation_id,
                Timer.due_at >= now,
            )
        )
    )
    routines = session.execute(
        select(Routine.cron, Routine.timezone).where(
            Routine.conversation_id == conversation_id, Routine.status == "active"
        )
    ).all()
    for cron, zone in routines:
        local_now = now.astimezone(ZoneInfo(zone))
        following = croniter(cron, local_now, second_at_beginning=True).get_next(datetime)
        wakes.append(following.astimezone(now.tzinfo))
    return wakes


def claim_warming(session: Session, conversation_id: str, now: datetime, lifetime_s: float) -> bool:
    """Claim the right to warm the conversation's cache now: at most once per cache lifetime
    (a model call of the conversation within it has warmed it already)."""
    since = now - timedelta(seconds=lifetime_s)
    conversation = session.get(Conversation, conversation_id, with_for_update=True)
    if conversation is None:
        return False
    if conversation.warmed_at is not None and conversation.warmed_at > since:
        return False
    called = session.scalar(
        select(func.max(ModelCall.started_at)).where(
            ModelCall.conversation_id == conversation_id,
            ModelCall.sections.is_not(None),  # a request of the conversation's prompt
        )
    )
    if called is not None and called > since:
        return False
    conversation.warmed_at = now
    session.flush()
    return True


def last_prompt_size(session: Session, turn_id: str) -> tuple[dict[str, int], int] | None:
    """The usage the turn's last model call reported, and the meter's estimate of its prompt."""
    found = session.execute(
        select(
            ModelCall.input_tokens,
            ModelCall.cache_read_tokens,
            ModelCall.cache_write_tokens,
            ModelCall.meter_prompt_tokens,
        )
        # The turn's own calls (step >= 0), not the safety reviewer's (step -1).
        .where(
            ModelCall.turn_id == turn_id,
            ModelCall.finished_at.is_not(None),
            ModelCall.step >= 0,
        )
        .order_by(ModelCall.started_at.desc(), ModelCall.step.desc())
        .limit(1)
    ).first()
    if found is None:
        return None
    usage = {
        "input_tokens": found[0],
        "cache_read_tokens": found[1],
        "cache_write_tokens": found[2],
    }
    return usage, int(found[3])
