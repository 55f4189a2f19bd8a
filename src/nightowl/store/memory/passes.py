"""The memory pass's records in the store: one per turn (`memory_passes`), the consolidations
of a full profile (`memory_consolidations`), and the turn messages the pass reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from nightowl.store.conversations import MessageInfo, message_info
from nightowl.store.ids import new_id
from nightowl.store.memory_tables import MemoryConsolidation, MemoryPassRecord
from nightowl.store.row_views import view_of
from nightowl.store.tables import Message, utcnow


@dataclass(frozen=True)
class Consolidation:
    """A consolidation of a full profile: the facts' texts that went and came, and how
    (`method`: model, least_used or rejected)."""

    method: str
    removed: list[str]
    added: list[str]
    detail: str


@dataclass(frozen=True)
class ConsolidationInfo:
    """A stored consolidation, as the owner reads it."""

    id: str
    turn_id: str | None
    method: str
    removed: list[str]
    added: list[str]
    detail: str
    created_at: datetime


@dataclass(frozen=True)
class PassRecord:
    """What a turn's memory pass did and what its model calls cost."""

    turn_id: str
    user_id: str
    conversation_id: str
    model: str
    input_tokens: int
    output_tokens: int
    outcome: dict[str, Any]


def pass_recorded(session: Session, turn_id: str) -> bool:
    """Whether the turn's memory pass was written already."""
    return session.get(MemoryPassRecord, turn_id) is not None


def user_messages_of_turn(session: Session, turn_id: str) -> list[MessageInfo]:
    """The user messages a turn took, in order."""
    rows = session.scalars(_USER_MESSAGES_OF_TURN, {"turn_id": turn_id}).all()
    return [message_info(row) for row in rows]


# Prebuilt: every turn's memory pass reads them.
_USER_MESSAGES_OF_TURN = (
    select(Message)
    .where(Message.turn_id == bindparam("turn_id"), Message.role == "user")
    .order_by(Message.seq)
)


def record_consolidation(
    session: Session, user_id: str, turn_id: str | None, found: Consolidation
) -> None:
    """Keep a consolidation of the user's profile (the owner can read and revert it)."""
    session.add(
        MemoryConsolidation(
            id=new_id("cons"),
            user_id=user_id,
            turn_id=turn_id,
            **vars(found),  # what went, what came, and how
            created_at=utcnow(),
        )
    )


def record_pass(session: Session, record: PassRecord) -> None:
    """Mark the turn's memory pass written (a second run finds it and writes nothing)."""
    session.add(
        MemoryPassRecord(
            **vars(record),
            created_at=utcnow(),
        )
    )
    session.flush()


def consolidations_of(session: Session, user_id: str, limit: int = 200) -> list[ConsolidationInfo]:
    """The user's newest consolidations first."""
    rows = session.scalars(
        select(MemoryConsolidation)
        .where(MemoryConsolidation.user_id == user_id)
        .order_by(MemoryConsolidation.created_at.desc())
        .limit(limit)
    )
    return [
        view_of(ConsolidationInfo, r, removed=list(r.removed), added=list(r.added)) for r in rows
    ]
