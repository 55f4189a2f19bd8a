"""Compactions: when a conversation may be compacted, and the record of one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.orm import Session

from nightowl.store.ids import new_id
from nightowl.store.tables import (
    Compaction,
    Message,
    ModelCall,
    PromptPinRow,
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
    row = session.execute(_LATEST, {"conversation_id": conversation_id}).first()
    if row is None:
        return None
    return CompactionInfo(row.id, row.through_entry_id, row.entry, row.created_at)


# Prebuilt: every model call of a turn reads it (a statement built per call costs three to
# five times the CPU of running a prebuilt one).
_LATEST = (
    select(Compaction.id, Compaction.through_entry_id, Compaction.entry, Compaction.created_at)
    .where(Compaction.conversation_id == bindparam("conversation_id"))
    .order_by(Compaction.created_at.desc(), Compaction.through_entry_id.desc())
    .limit(1)
)


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


# Prebuilt: every turn's finish reads it.
_LAST_PROMPT_SIZE = (
    select(
        ModelCall.input_tokens,
        ModelCall.cache_read_tokens,
        ModelCall.cache_write_tokens,
        ModelCall.meter_prompt_tokens,
    )
    # The turn's own calls (step >= 0), not the safety reviewer's (step -1).
    .where(
        ModelCall.turn_id == bindparam("turn_id"),
        ModelCall.finished_at.is_not(None),
        ModelCall.step >= 0,
    )
    .order_by(ModelCall.started_at.desc(), ModelCall.step.desc())
    .limit(1)
)


def last_prompt_size(session: Session, turn_id: str) -> tuple[dict[str, int], int] | None:
    """The usage the turn's last model call reported, and the meter's estimate of its prompt."""
    found = session.execute(_LAST_PROMPT_SIZE, {"turn_id": turn_id}).first()
    if found is None:
        return None
    usage = {
        "input_tokens": found[0],
        "cache_read_tokens": found[1],
        "cache_write_tokens": found[2],
    }
    return usage, int(found[3])
