"""Cache warming's reads and claim: at most one warming call per conversation per cache
lifetime."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nightowl.store.tables import Conversation, ModelCall


def newest_conversation_id(session: Session, owner_id: str) -> str | None:
    """The owner's most recently created conversation of any kind, if any."""
    return session.scalar(
        select(Conversation.id)
        .where(Conversation.owner_id == owner_id)
        .order_by(Conversation.created_at.desc())
        .limit(1)
    )


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
