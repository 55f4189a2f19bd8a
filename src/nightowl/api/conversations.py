"""Conversation and message routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError
from nightowl.api.schemas import (
    ConversationOut,
    MessageOut,
    MessagePage,
    NewConversation,
    NewMessage,
)
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import (
    create_conversation,
    get_conversation,
    list_conversations,
    messages_after,
)

routes = APIRouter(prefix="/v1/conversations", tags=["conversations"])


@routes.post("", status_code=201)
def start_conversation(
    body: NewConversation, user: CurrentUser, request: Request
) -> ConversationOut:
    """Start a conversation owned by the caller."""
    with database_of(request).write() as session:
        info = create_conversation(
            session, user.id, kind=body.kind, channel="api", title=body.title
        )
    return ConversationOut.of(info)


@routes.get("")
def my_conversations(user: CurrentUser, request: Request) -> list[ConversationOut]:
    """The caller's conversations, most recently active first."""
    with database_of(request).read() as session:
        return [ConversationOut.of(info) for info in list_conversations(session, user.id)]


@routes.get("/{conversation_id}")
def one_conversation(conversation_id: str, user: CurrentUser, request: Request) -> ConversationOut:
    """One of the caller's conversations."""
    with database_of(request).read() as session:
        return ConversationOut.of(get_conversation(session, conversation_id, user.id))


@routes.post("/{conversation_id}/messages", status_code=201)
def send_message(
    conversation_id: str,
    body: NewMessage,
    user: CurrentUser,
    request: Request,
    response: Response,
) -> MessageOut:
    """Store a message and wake the conversation. A repeated `client_id` returns the original."""
    limit: int = request.app.state.settings.max_message_chars
    if len(body.text) > limit:
        raise ApiError(
            413,
            "text_too_long",
            f"text is {len(body.text)} characters; the limit is {limit}. "
            "Split it into several messages.",
        )
    with database_of(request).read() as session:
        conversation = get_conversation(session, conversation_id, user.id)
    is_owner = user.role == "owner"
    router: Router = request.app.state.router
    accepted = router.accept(
        IncomingMessage(
            source="api",
            idempotency_key=f"{conversation.id}:{body.client_id}",
            conversation_id=conversation.id,
            text=body.text,
            trust="owner" if is_owner else "member",
            priority=(
                Priority.OWNER_DIRECT
                if is_owner and conversation.kind == "direct"
                else Priority.GROUP
            ),
            author_id=user.id,
            client_id=body.client_id,
        )
    )
    if accepted.duplicate:
        response.status_code = 200
    return MessageOut.of(accepted.message)


@routes.get("/{conversation_id}/messages")
def read_messages(
    conversation_id: str,
    user: CurrentUser,
    request: Request,
    after: Annotated[int, Query(ge=0, description="Return messages with seq > after")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> MessagePage:
    """Messages with `seq > after`, in order."""
    with database_of(request).read() as session:
        conversation = get_conversation(session, conversation_id, user.id)
        messages = messages_after(session, conversation.id, after, limit)
    return MessagePage(
        messages=[MessageOut.of(m) for m in messages], last_seq=conversation.last_seq
    )
