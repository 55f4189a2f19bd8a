"""The outbox of visible messages: each carries an idempotency key, so a retried or replayed
step finds its message already delivered instead of showing it twice."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from nightowl.store.conversations import MessageInfo, append_message, find_by_server_key
from nightowl.store.helper_agents import surface_of


def deliver_to_user(
    session: Session,
    conversation_id: str,
    *,
    key: str,
    body: str,
    turn_id: str | None,
    meta: dict[str, Any] | None = None,
    role: str = "agent",
) -> MessageInfo:
    """Post the agent's message once per `key` (derived from the workflow and its step). A
    helper has no audience of its own: what it shows the owner (an approval, a draft)
    appears in its parent conversation, saying which helper asks."""
    surface = surface_of(session, conversation_id)
    if surface != conversation_id:
        meta = {**(meta or {}), "helper_conversation": conversation_id}
        body = f"**A helper asks** (working on this conversation's behalf):\n\n{body}"
        conversation_id = surface
    existing = find_by_server_key(session, conversation_id, key)
    if existing is not None:
        return existing
    return append_message(
        session,
        conversation_id,
        role=role,
        body=body,
        trust="agent",
        server_key=key,
        turn_id=turn_id,
        meta=meta,
    )
