"""The owner's open approval requests and drafts (questions a running turn waits on)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.conversations import MessageInfo, message_info
from nightowl.store.errors import NotFound
from nightowl.store.questions import controls_of
from nightowl.store.tables import Conversation, Message, Turn


def open_requests(session: Session, owner_id: str, kind: str) -> list[MessageInfo]:
    """Open `approval` requests or `draft`s of the owner's conversations, oldest first."""
    rows = session.scalars(
        select(Message)
        .join(Turn, Turn.waiting_on == Message.id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(Conversation.owner_id == owner_id, Turn.status == "running")
        .order_by(Message.created_at)
    )
    found = []
    for row in rows:
        controls = controls_of(row.meta or {})
        approval = controls.get("ask") == "approval" and bool(controls.get("deadline"))
        if (kind == "approval" and approval) or (kind == "draft" and controls.get("send")):
            found.append(message_info(row))
    return found


def conversation_of(session: Session, owner_id: str, message_id: str) -> str:
    """The conversation of one of the owner's messages (NotFound for anyone else's)."""
    row = session.get(Message, message_id)
    owner = session.get(Conversation, row.conversation_id) if row is not None else None
    if row is None or owner is None or owner.owner_id != owner_id:
        raise NotFound(f"no approval request or draft {message_id!r}")
    return row.conversation_id
