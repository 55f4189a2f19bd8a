"""Safety routes: open approvals and drafts (and answering them), the audit log, secrets."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import MAX_INT64, Id, PathId, RequestBody, SafeText, SecretName
from nightowl.api.schemas import MessageOut, seen_before
from nightowl.router.router import Router
from nightowl.safety.vault import set_allowed_hosts, set_secret
from nightowl.store.audit import AuditInfo, audit_log
from nightowl.store.pending import conversation_of, open_requests
from nightowl.store.secrets import drop_secret, secrets_of
from nightowl.store.users import UserInfo

routes = APIRouter(prefix="/v1", tags=["safety"])


class Decision(RequestBody):
    """Body of `POST /v1/approvals/{id}`."""

    client_id: Id
    decision: Literal["approve", "deny"]


class DraftAnswer(RequestBody):
    """Body of `POST /v1/drafts/{id}`: send (the text as edited, or as drafted) or discard."""

    client_id: Id
    action: Literal["send", "discard"]
    text: SafeText | None = Field(default=None, max_length=32_000)


@dataclass(frozen=True)
class AuditOut(AuditInfo):
    """One audit entry."""


class SecretOut(BaseModel):
    """A secret's name and allowed hosts (values are never returned)."""

    name: str
    allowed_hosts: list[str]
    updated_at: datetime


Host = Annotated[SafeText, Field(min_length=1, max_length=300)]


class SecretValue(RequestBody):
    """Body of `PUT /v1/secrets/{name}`: the value (at least 4 characters) and, optionally,
    the hosts it may be sent to without the owner's approval (left out: a replaced secret
    keeps its hosts)."""

    value: SafeText = Field(min_length=1, max_length=20_000)
    allowed_hosts: list[Host] | None = Field(default=None, max_length=20)


class SecretHosts(RequestBody):
    """Body of `PUT /v1/secrets/{name}/hosts`."""

    allowed_hosts: list[Host] = Field(max_length=20)


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
    router: Router = request.app.state.router
    answered = router.answer(conversation_id, message_id, answer, client_id, user.id)
    if answered.duplicate:
        response.status_code = 200
    return MessageOut.of(answered.message)


def _still_open(request: Request, user: UserInfo, kind: str) -> list[MessageOut]:
    """The owner's questions of this kind (approval, draft) that still take an answer."""
    with database_of(request).read() as session:
        return [MessageOut.of(m, "open") for m in open_requests(session, user.id, kind)]


@routes.get("/approvals")
def my_approvals(user: CurrentUser, request: Request) -> list[MessageOut]:
    """Actions held for the owner's approval, still open."""
    return _still_open(request, user, "approval")


@routes.post(
    "/approvals/{message_id}",
    status_code=201,
    responses={**seen_before("decision"), **error_responses(403, 409)},
)
def decide(
    message_id: PathId, body: Decision, user: CurrentUser, request: Request, response: Response
) -> MessageOut:
    """Approve or deny a held action (409 once its window closed: it stays blocked)."""
    return _answer(request, user, message_id, {"value": body.decision}, body.client_id, response)


@routes.get("/drafts")
def my_drafts(user: CurrentUser, request: Request) -> list[MessageOut]:
    """Drafts of sends (messages, payments) waiting for Send or Discard."""
    return _still_open(request, user, "draft")


@routes.post(
    "/drafts/{message_id}",
    status_code=201,
    responses={**seen_before("answer"), **error_responses(403, 409)},
)
def answer_draft(
    message_id: PathId, body: DraftAnswer, user: CurrentUser, request: Request, response: Response
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
    conversation_id: Annotated[Id | None, Query(description="Only this conversation's.")] = None,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_INT64, description="Entries with an id below this.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AuditOut]:
    """The audit log, newest first: reviews, decisions, approvals, denials and sends."""
    with database_of(request).read() as session:
        entries = audit_log(
            session, user.id, conversation_id=conversation_id, before=before, limit=limit
        )
    return [AuditOut(**vars(e)) for e in entries]


@routes.get("/secrets")
def my_secrets(user: CurrentUser, request: Request) -> list[SecretOut]:
    """The owner's secrets: names and allowed hosts (values are never shown)."""
    with database_of(request).read() as session:
        return [SecretOut(**vars(info)) for info in secrets_of(session, user.id)]


@routes.put("/secrets/{name}", status_code=204, responses=error_responses(403))
def put_secret(
    name: SecretName, body: SecretValue, user: CurrentUser, request: Request
) -> Response:
    """Store or replace a secret; tools use it as `{{secret:NAME}}`."""
    _owner_only(user, "manages secrets")
    with database_of(request).write() as session:
        set_secret(
            session, request.app.state.vault_key, user.id, name, body.value, body.allowed_hosts
        )
    return Response(status_code=204)


@routes.put("/secrets/{name}/hosts", responses=error_responses(403, 404))
def put_secret_hosts(
    name: SecretName, body: SecretHosts, user: CurrentUser, request: Request
) -> SecretOut:
    """Replace the hosts a secret may be sent to without the owner's approval."""
    _owner_only(user, "manages secrets")
    with database_of(request).write() as session:
        info = set_allowed_hosts(session, user.id, name, body.allowed_hosts)
    return SecretOut(**vars(info))


@routes.delete("/secrets/{name}", status_code=204, responses=error_responses(403))
def remove_secret(name: SecretName, user: CurrentUser, request: Request) -> Response:
    """Delete a secret."""
    _owner_only(user, "manages secrets")
    with database_of(request).write() as session:
        drop_secret(session, user.id, name)
    return Response(status_code=204)
