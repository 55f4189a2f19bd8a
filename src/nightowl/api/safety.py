"""Safety routes: open approvals and drafts (and answering them), the audit log, secrets."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError
from nightowl.api.schemas import CLIENT_ID_PATTERN, MessageOut
from nightowl.engine.durable import DurableEngine
from nightowl.safety.audit import audit_log
from nightowl.safety.pending import conversation_of, open_requests
from nightowl.safety.vault import delete_secret, secret_names_of, set_secret
from nightowl.store.questions import answer_question
from nightowl.store.users import UserInfo

routes = APIRouter(prefix="/v1", tags=["safety"])


class Decision(BaseModel):
    """Body of `POST /v1/approvals/{id}`."""

    client_id: str = Field(min_length=1, max_length=200, pattern=CLIENT_ID_PATTERN)
    decision: Literal["approve", "deny"]


class DraftAnswer(BaseModel):
    """Body of `POST /v1/drafts/{id}`: send (the text as edited, or as drafted) or discard."""

    client_id: str = Field(min_length=1, max_length=200, pattern=CLIENT_ID_PATTERN)
    action: Literal["send", "discard"]
    text: str | None = Field(default=None, max_length=32_000)


class AuditOut(BaseModel):
    """One audit entry."""

    id: int
    at: datetime
    conversation_id: str
    turn_id: str
    kind: str
    tool: str
    effect: str
    decision: str
    reason: str
    detail: dict[str, Any]


class SecretOut(BaseModel):
    """A secret's name (values are never returned)."""

    name: str
    updated_at: datetime


class SecretValue(BaseModel):
    """Body of `PUT /v1/secrets/{name}`."""

    value: str = Field(min_length=1, max_length=20_000)


def _owner_only(user: UserInfo, what: str) -> None:
    if user.role != "owner":
        raise ApiError(403, "not_owner", f"only the owner {what}")


def _answer(
    request: Request,
    user: UserInfo,
    message_id: str,
    answer: dict[str, Any],
    client_id: str,
    response: Response,
) -> MessageOut:
    database = database_of(request)
    with database.read() as session:
        conversation_id = conversation_of(session, user.id, message_id)
    _owner_only(user, "approves actions and sends drafts")
    with database.write() as session:
        answered = answer_question(
            session,
            conversation_id,
            message_id,
            answer=answer,
            client_id=client_id,
            author_id=user.id,
        )
    engine: DurableEngine = request.app.state.engine
    try:
        engine.deliver_answer(answered.turn_id, message_id)
    except Exception:
        if not answered.duplicate:
            raise
    if answered.duplicate:
        response.status_code = 200
    return MessageOut.of(answered.message)


@routes.get("/approvals")
def my_approvals(user: CurrentUser, request: Request) -> list[MessageOut]:
    """Actions held for the owner's approval, still open."""
    with database_of(request).read() as session:
        return [MessageOut.of(m, "open") for m in open_requests(session, user.id, "approval")]


@routes.post("/approvals/{message_id}", status_code=201)
def decide(
    message_id: str, body: Decision, user: CurrentUser, request: Request, response: Response
) -> MessageOut:
    """Approve or deny a held action (409 once its window closed: it stays blocked)."""
    return _answer(request, user, message_id, {"value": body.decision}, body.client_id, response)


@routes.get("/drafts")
def my_drafts(user: CurrentUser, request: Request) -> list[MessageOut]:
    """Drafts of sends (messages, payments) waiting for Send or Discard."""
    with database_of(request).read() as session:
        return [MessageOut.of(m, "open") for m in open_requests(session, user.id, "draft")]


@routes.post("/drafts/{message_id}", status_code=201)
def answer_draft(
    message_id: str, body: DraftAnswer, user: CurrentUser, request: Request, response: Response
) -> MessageOut:
    """Send a draft (as edited) or discard it; the runtime performs the send exactly once."""
    answer: dict[str, Any] = {"action": body.action}
    if body.text is not None:
        answer["text"] = body.text
    return _answer(request, user, message_id, answer, body.client_id, response)


@routes.get("/audit")
def my_audit(
    user: CurrentUser,
    request: Request,
    conversation_id: str | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[AuditOut]:
    """The audit log, newest first: reviews, decisions, approvals, denials and sends."""
    if not 1 <= limit <= 500:
        raise ApiError(422, "invalid", "limit must be between 1 and 500")
    with database_of(request).read() as session:
        entries = audit_log(
            session, user.id, conversation_id=conversation_id, before=before, limit=limit
        )
    return [AuditOut(**vars(e)) for e in entries]


@routes.get("/secrets")
def my_secrets(user: CurrentUser, request: Request) -> list[SecretOut]:
    """The names of the owner's secrets (values are never shown)."""
    with database_of(request).read() as session:
        return [SecretOut(name=n, updated_at=t) for n, t in secret_names_of(session, user.id)]


@routes.put("/secrets/{name}", status_code=204)
def put_secret(name: str, body: SecretValue, user: CurrentUser, request: Request) -> Response:
    """Store or replace a secret; tools use it as `{{secret:NAME}}`."""
    _owner_only(user, "manages secrets")
    with database_of(request).write() as session:
        set_secret(session, request.app.state.vault_key, user.id, name, body.value)
    return Response(status_code=204)


@routes.delete("/secrets/{name}", status_code=204)
def remove_secret(name: str, user: CurrentUser, request: Request) -> Response:
    """Delete a secret."""
    _owner_only(user, "manages secrets")
    with database_of(request).write() as session:
        delete_secret(session, user.id, name)
    return Response(status_code=204)
