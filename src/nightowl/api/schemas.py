"""Request and response bodies of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from nightowl.api.inputs import MAX_INT64, Id, RequestBody, SafeText
from nightowl.store.conversations import ConversationInfo, MessageInfo

# The most a message may hold whatever the settings say (NIGHTOWL_MAX_MESSAGE_CHARS is the
# limit in force, answered 413 past it).
MAX_MESSAGE_CHARS = 1_000_000


class NewConversation(RequestBody):
    """Body of `POST /v1/conversations`."""

    kind: Literal["direct", "group"] = "direct"
    title: SafeText = Field(default="", max_length=300)


class NewMessage(RequestBody):
    """Body of `POST /v1/conversations/{id}/messages`. Retries reuse the same `client_id`."""

    client_id: Id = Field(
        description="The client's own id for this message (letters, digits, . _ : -).",
    )
    text: SafeText = Field(max_length=MAX_MESSAGE_CHARS)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text is empty; write something to send")
        return value


class ConversationOut(BaseModel):
    """A conversation; `activity` says what a running turn is doing ("" when at rest)."""

    id: str
    kind: str
    channel: str
    title: str
    last_seq: int
    read_seq: int
    unread: int
    preview: str
    activity: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(
        cls, info: ConversationInfo, *, unread: int = 0, preview: str = "", activity: str = ""
    ) -> ConversationOut:
        return cls(**vars(info), unread=unread, preview=preview, activity=activity)


class ReadPosition(RequestBody):
    """Body of `POST /v1/conversations/{id}/read`: the newest seq the owner has seen."""

    seq: int = Field(ge=0, le=MAX_INT64)


class TypingOut(BaseModel):
    """Answer of `POST /v1/conversations/{id}/typing`."""

    warming: bool = Field(
        description="True when this request started warming the provider cache; false when it "
        "is warm already (within the cache lifetime) or nothing was sent yet."
    )


class NewAnswer(RequestBody):
    """Body of `POST .../messages/{id}/answer`: a button's `value`, or a draft's `action`."""

    client_id: Id = Field(description="The client's own id for this answer; retries reuse it.")
    value: SafeText | None = Field(default=None, max_length=200, description="The button's value.")
    action: Literal["send", "discard"] | None = Field(
        default=None, description="For a draft: send it (with `text`, edited) or discard it."
    )
    text: SafeText | None = Field(default=None, max_length=32_000)

    def payload(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if k != "client_id" and v is not None}


class FileOut(BaseModel):
    """An attached file; `url` downloads it (with the same bearer token)."""

    name: str
    size: int
    content_type: str
    url: str


class ActionOut(BaseModel):
    """The whole action an approval is about (safety/wording.py: `action_detail`)."""

    tool: str
    effect: str
    arguments: str  # JSON, indented, with hidden characters escaped
    chars: int  # the arguments' length as the approval's text counts it
    cut: bool  # the approval's text shows only the start of them


class ControlsOut(BaseModel):
    """What a question offers and whether it still takes an answer."""

    state: Literal["open", "answered", "closed"]
    ask: str = "question"
    buttons: list[dict[str, str]] = Field(default_factory=list)
    draft: str | None = None
    action: ActionOut | None = None


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
    important: bool = False
    files: list[FileOut] = Field(default_factory=list)
    controls: ControlsOut | None = None
    answer_to: str | None = None
    answer: dict[str, Any] | None = None
    turn_id: str | None = Field(
        default=None,
        description="The turn that wrote an agent message: its timeline is "
        "/v1/conversations/{conversation_id}/turns/{turn_id}/timeline.",
    )

    @classmethod
    def of(cls, info: MessageInfo, question_state: str | None = None) -> MessageOut:
        meta = info.meta
        files = [
            FileOut(
                name=str(f["name"]),
                size=int(f["size"]),
                content_type=str(f["content_type"]),
                url=f"/v1/conversations/{info.conversation_id}/messages/{info.id}/files/{n}",
            )
            for n, f in enumerate(meta.get("files") or [])
        ]
        asked = meta.get("controls") or {}
        controls = None
        if asked:
            controls = ControlsOut(
                state=question_state or "closed",  # type: ignore[arg-type]
                ask=str(asked.get("ask", "question")),
                buttons=list(asked.get("buttons") or []),
                draft=asked.get("draft"),
                action=ActionOut(**asked["action"]) if asked.get("action") else None,
            )
        # The stored fields a client sees (not `meta` or the server's key), the rest from meta.
        shown = {**vars(info), "turn_id": info.turn_id if info.role == "agent" else None}
        return cls(
            **shown,
            important=bool(meta.get("important")),
            files=files,
            controls=controls,
            answer_to=meta.get("answer_to"),
            answer=meta.get("answer"),
        )


class MessagePage(BaseModel):
    """Messages after a sequence number, oldest first; `last_seq` is the conversation's newest."""

    messages: list[MessageOut]
    last_seq: int


def seen_before(what: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI for the 200 a retried request (same `client_id`) gets: the original `what`."""
    return {
        200: {
            "model": MessageOut,
            "description": f"The original {what}: its client_id was seen before.",
        }
    }
