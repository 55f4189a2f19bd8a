"""What the autonomy report is made from: the owner's audit events about consequential calls,
and their model calls with what woke each one's turn (harness/report.py sums them up)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, select
from sqlalchemy.orm import Session, aliased

from nightowl.harness.report import ACTION_KINDS, ActionEvent, Spend, source_of
from nightowl.store.tables import (
    AuditEvent,
    Conversation,
    Helper,
    Message,
    ModelCall,
    Trigger,
    Turn,
)


def action_events(session: Session, owner_id: str, since: datetime) -> list[ActionEvent]:
    """The owner's reviews, questions and answers since `since`. An event's key is
    `<turn>:<slot>:<kind>`, so the call is the key without its last part."""
    rows = session.execute(
        select(AuditEvent.event_key, AuditEvent.kind, AuditEvent.at)
        .where(
            AuditEvent.owner_id == owner_id,
            AuditEvent.at >= since,
            AuditEvent.kind.in_(ACTION_KINDS),
        )
        .order_by(AuditEvent.id)
    ).all()
    return [ActionEvent(key.rsplit(":", 1)[0], kind, at) for key, kind, at in rows]


def spends(
    session: Session, owner_id: str, since: datetime, background_steps: frozenset[int]
) -> list[Spend]:
    """The owner's model calls since `since` (helpers' included), each with its source."""
    first = aliased(Message)
    # What woke the turn: the trigger of the first message of its batch.
    trigger = (
        select(Trigger.source)
        .join(first, first.id == Trigger.message_id)
        .where(
            Trigger.conversation_id == Turn.conversation_id,  # (indexed: a turn's few triggers)
            first.conversation_id == Turn.conversation_id,
            first.seq >= Turn.batch_first_seq,
            first.seq <= Turn.batch_last_seq,
        )
        .order_by(first.seq)
        .limit(1)
        .correlate(Turn)
        .scalar_subquery()
    )
    rows = session.execute(
        select(
            ModelCall.started_at,
            ModelCall.turn_id,
            ModelCall.step,
            ModelCall.input_tokens
            + ModelCall.cache_read_tokens
            + ModelCall.cache_write_tokens
            + ModelCall.output_tokens,
            ModelCall.cost_usd,
            Helper.id,
            Turn.routine_id,
            trigger,
        )
        .join(Conversation, Conversation.id == ModelCall.conversation_id)
        .outerjoin(Turn, Turn.id == ModelCall.turn_id)
        .outerjoin(Helper, Helper.conversation_id == ModelCall.conversation_id)
        .where(and_(Conversation.owner_id == owner_id, ModelCall.started_at >= since))
        .order_by(ModelCall.started_at)
    ).all()
    return [
        Spend(
            at,
            source_of(
                turn_id=turn_id,
                step=step,
                helper=helper is not None,
                routine=routine is not None,
                trigger=source,
                background_steps=background_steps,
            ),
            int(tokens or 0),
            cost,
        )
        for at, turn_id, step, tokens, cost, helper, routine, source in rows
    ]
