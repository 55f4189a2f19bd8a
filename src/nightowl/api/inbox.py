"""`GET /v1/inbox`: everything that waits on the caller, across their conversations.

Items are answered with the calls the conversation uses (`POST …/messages/{id}/answer`, or
`/v1/approvals/{id}` and `/v1/drafts/{id}`); a notice leaves once its conversation is read
(`POST …/read`). The list is computed from the store on every request (store/inbox.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import error_responses
from nightowl.api.inputs import Id
from nightowl.api.schemas import MessageOut
from nightowl.store.conversations import get_conversation
from nightowl.store.inbox import KINDS, InboxItem, InboxKind, inbox_items

routes = APIRouter(prefix="/v1", tags=["inbox"])


class InboxItemOut(BaseModel):
    """One thing waiting on the caller: what it is, where it lives, when it expires."""

    id: str  # the message that asks or tells
    kind: InboxKind
    conversation_id: str
    conversation_title: str
    link: str  # the item in the web app ("/#c=<conversation>&m=<message>")
    created_at: datetime
    deadline: datetime | None  # an approval's window closes then (the action stays blocked)
    message: MessageOut  # with its controls, to answer in place

    @classmethod
    def of(cls, item: InboxItem) -> InboxItemOut:
        asks = item.kind in ("approval", "question", "draft")
        return cls(
            id=item.id,
            kind=item.kind,  # type: ignore[arg-type]
            conversation_id=item.message.conversation_id,
            conversation_title=item.conversation_title,
            link=item.link,
            created_at=item.message.created_at,
            deadline=item.deadline,
            message=MessageOut.of(item.message, "open" if asks else None),
        )


class InboxOut(BaseModel):
    """The inbox: its items (soonest deadline first, then newest) and how many of each kind."""

    items: list[InboxItemOut]
    counts: dict[str, int]
    total: int


@routes.get("/inbox", responses=error_responses(404))
def my_inbox(
    user: CurrentUser,
    request: Request,
    conversation_id: Annotated[
        Id | None, Query(description="Only this conversation's items.")
    ] = None,
    kind: Annotated[
        list[InboxKind] | None, Query(max_length=len(KINDS), description="Only these kinds.")
    ] = None,
) -> InboxOut:
    """Open questions, approvals, drafts, unread helper reports, failed or stopped turns and
    budget stops of the caller's conversations (a member sees only their own)."""
    with database_of(request).read() as session:
        if conversation_id is not None:
            get_conversation(session, conversation_id, user.id)  # the caller's, or 404
        found = inbox_items(session, user.id, conversation_id=conversation_id, kinds=kind)
    counts = {k: 0 for k in KINDS}
    for item in found:
        counts[item.kind] += 1
    return InboxOut(items=[InboxItemOut.of(i) for i in found], counts=counts, total=len(found))
