"""Conversation and message routes."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import MAX_INT64, PathId
from nightowl.api.schemas import (
    ConversationOut,
    MessageOut,
    MessagePage,
    NewAnswer,
    NewConversation,
    NewMessage,
    ReadPosition,
    TypingOut,
    seen_before,
)
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import (
    ConversationInfo,
    create_conversation,
    get_conversation,
    list_conversations,
    mark_read,
    messages_after,
    previews,
    title_if_untitled,
    unread_counts,
)
from nightowl.store.questions import question_states
from nightowl.store.turns import activities

routes = APIRouter(prefix="/v1/conversations", tags=["conversations"])
log = logging.getLogger(__name__)


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


def _described(session: Session, infos: list[ConversationInfo]) -> list[ConversationOut]:
    unread = unread_counts(session, infos)
    preview = previews(session, infos)
    busy = activities(session, [info.id for info in infos])
    return [
        ConversationOut.of(
            info,
            unread=unread.get(info.id, 0),
            preview=preview.get(info.id, ""),
            activity=busy.get(info.id, ""),
        )
        for info in infos
    ]


@routes.get("")
def my_conversations(user: CurrentUser, request: Request) -> list[ConversationOut]:
    """The caller's conversations, most recently active first, with unread counts."""
    with database_of(request).read() as session:
        return _described(session, list_conversations(session, user.id))


@routes.get("/{conversation_id}")
def one_conversation(
    conversation_id: PathId, user: CurrentUser, request: Request
) -> ConversationOut:
    """One of the caller's conversations, with what its running turn is doing."""
    with database_of(request).read() as session:
        return _described(session, [get_conversation(session, conversation_id, user.id)])[0]


@routes.post("/{conversation_id}/read")
def read_up_to(
    conversation_id: PathId, body: ReadPosition, user: CurrentUser, request: Request
) -> ConversationOut:
    """Mark messages up to `seq` as read on every device (the position never moves back)."""
    database = database_of(request)
    with database.write() as session:
        mark_read(session, conversation_id, user.id, body.seq)
    with database.read() as session:
        return _described(session, [get_conversation(session, conversation_id, user.id)])[0]


@routes.post("/{conversation_id}/typing", status_code=202)
async def owner_typing(conversation_id: PathId, user: CurrentUser, request: Request) -> TypingOut:
    """The owner is typing: warm the provider's cache for this conversation, at most once per
    cache lifetime (`warming` says whether this request started it)."""
    warmer = request.app.state.warmer

    def claim() -> bool:
        with database_of(request).read() as session:
            get_conversation(session, conversation_id, user.id)  # 404 unless it is theirs
        return bool(warmer.claim(conversation_id))

    warming = await asyncio.to_thread(claim)
    if warming:
        warmer.start(conversation_id)
    return TypingOut(warming=warming)


@routes.post(
    "/{conversation_id}/messages",
    status_code=201,
    responses={**seen_before("message"), **error_responses(409, 413)},
)
def send_message(
    conversation_id: PathId,
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
        if accepted.message.body != body.text or accepted.message.author_id != user.id:
            raise ApiError(
                409,
                "client_id_reused",
                f"client_id {body.client_id!r} was already used in this conversation for a "
                "different message; a retry sends the same text, a new message needs a new "
                "client_id",
            )
        response.status_code = 200
    elif not conversation.title:
        with database_of(request).write() as session:
            title_if_untitled(session, conversation.id, body.text)
    return MessageOut.of(accepted.message)


@routes.get("/{conversation_id}/messages")
def read_messages(
    conversation_id: PathId,
    user: CurrentUser,
    request: Request,
    after: Annotated[
        int, Query(ge=0, le=MAX_INT64, description="Return messages with seq > after")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> MessagePage:
    """Messages with `seq > after`, in order."""
    with database_of(request).read() as session:
        conversation = get_conversation(session, conversation_id, user.id)
        messages = messages_after(session, conversation.id, after, limit)
        states = question_states(session, messages)
    return MessagePage(
        messages=[MessageOut.of(m, states.get(m.id)) for m in messages],
        last_seq=conversation.last_seq,
    )


@routes.post(
    "/{conversation_id}/messages/{message_id}/answer",
    status_code=201,
    responses={**seen_before("answer"), **error_responses(403, 409)},
)
def answer(
    conversation_id: PathId,
    message_id: PathId,
    body: NewAnswer,
    user: CurrentUser,
    request: Request,
    response: Response,
) -> MessageOut:
    """Answer a question (a button's `value`, or a draft's `action`); the first answer wins.

    The answer is stored as a message of its own and resumes the turn that asked, once.
    A retried `client_id` returns the stored answer; a second answer gets 409.
    """
    database = database_of(request)
    with database.read() as session:
        conversation = get_conversation(session, conversation_id, user.id)
    if user.role != "owner":
        raise ApiError(403, "not_owner", "only the owner answers the agent's questions")
    router: Router = request.app.state.router
    answered = router.answer(conversation.id, message_id, body.payload(), body.client_id, user.id)
    if answered.duplicate:
        response.status_code = 200
    return MessageOut.of(answered.message)
