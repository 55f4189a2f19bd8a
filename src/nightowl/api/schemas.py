"""Request and response bodies of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from nightowl.store.conversations import ConversationInfo, MessageInfo


class NewConversation(BaseModel):
    """Body of `POST /v1/conversations`."""

    kind: Literal["direct", "group"] = "direct"
    title: str = Field(default="", max_length=300)


class NewMessage(BaseModel):
    """Body of `POST /v1/conversations/{id}/messages`. Retries reuse the same `client_id`."""

    client_id: str = Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._:\-]+$",
        description="The client's own id for this message (letters, digits, . _ : -).",
    )
    text: str

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is empty; write something to send")
        return value


class ConversationOut(BaseModel):
    """A conversation."""

    id: str
    kind: str
    channel: str
    title: str
    last_seq: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, info: ConversationInfo) -> ConversationOut:
        return cls(
            id=info.id,
            kind=info.kind,
            channel=info.channel,
            title=info.title,
            last_seq=info.last_seq,
            created_at=info.created_at,
            updated_at=info.updated_at,
        )


class MessageOut(BaseModel):
    """A stored message."""

    id: str
    conversation_id: str
    seq: int
    role: str
    author_id: str | None
    body: str
    client_id: str | None
    trust: str
    created_at: datetime

    @classmethod
    def of(cls, info: MessageInfo) -> MessageOut:
        return cls(
            id=info.id,
            conversation_id=info.conversation_id,
            seq=info.seq,
            role=info.role,
            author_id=info.author_id,
            body=info.body,
            client_id=info.client_id,
            trust=info.trust,
            created_at=info.created_at,
        )


class MessagePage(BaseModel):
    """Messages after a sequence number, oldest first; `last_seq` is the conversation's newest."""

    messages: list[MessageOut]
    last_seq: int
