"""Eval cases over HTTP: mark an agent's reply wrong (`POST …/messages/{id}/wrong`), list,
read and edit cases (their checker, kept or dropped), and each case's results per model.

Cases are the owner's: a member cannot see or make them (they hold whole conversations).
Replays run from the CLI (`nightowl evals run`), not from a request: a run on a local model
takes minutes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId, SafeText
from nightowl.evals.capture import mark_wrong
from nightowl.evals.cases import CaseError, Checker, load_shipped
from nightowl.evals.starter import STARTER_DIR
from nightowl.store.conversations import get_conversation
from nightowl.store.errors import Invalid
from nightowl.store.evals import CaseInfo, get_case, list_cases, results_of, update_case
from nightowl.store.users import UserInfo

routes = APIRouter(prefix="/v1", tags=["evals"])

Status = Literal["draft", "kept", "dropped"]


class MarkWrong(BaseModel):
    """What should have happened, in the owner's words (the case's rubric)."""

    expected: Annotated[SafeText, Field(min_length=1, max_length=4000)]


class CaseEdit(BaseModel):
    """A change to a case: its checker (replaced whole), status or title."""

    checker: dict[str, Any] | None = None
    status: Status | None = None
    title: Annotated[SafeText, Field(min_length=1, max_length=200)] | None = None


class ResultOut(BaseModel):
    """One replay's result."""

    run_id: str
    model: str
    passed: bool
    error: str
    cost_usd: float | None
    tokens: int
    seconds: float
    created_at: datetime


class CaseOut(BaseModel):
    """A case with its checker, what it keeps, and its results (oldest first)."""

    id: str
    source: str
    status: str
    title: str
    conversation_id: str | None
    message_id: str | None
    owner_words: str
    failed_reply: str
    checker: dict[str, Any]
    created_at: datetime | None
    history: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    results: list[ResultOut] = []

    @classmethod
    def of(cls, info: CaseInfo, full: bool = False) -> CaseOut:
        return cls(
            **vars(info),  # the fields that are not in `data` (the rest are left out)
            owner_words=str(info.data.get("owner_words", "")),
            failed_reply=str(info.data.get("failed_reply", "")),
            history=list(info.data.get("history", [])) if full else [],
            tool_results=list(info.data.get("tool_results", [])) if full else [],
        )


class CaseList(BaseModel):
    """The owner's cases and the shipped starter set, each with its results per model."""

    cases: list[CaseOut]
    models: list[str]


def _owner(user: UserInfo) -> None:
    if user.role != "owner":
        raise ApiError(403, "not_owner", "eval cases are the owner's")


@routes.post(
    "/conversations/{conversation_id}/messages/{message_id}/wrong",
    status_code=201,
    responses=error_responses(403, 404, 422),
)
def mark_reply_wrong(
    conversation_id: PathId,
    message_id: PathId,
    body: MarkWrong,
    user: CurrentUser,
    request: Request,
) -> CaseOut:
    """Mark an agent message wrong: a draft eval case from the conversation up to that turn
    (secrets redacted), with what should have happened; marking it again returns the case."""
    _owner(user)
    with database_of(request).write() as session:
        get_conversation(session, conversation_id, user.id)
        info = mark_wrong(
            session,
            owner_id=user.id,
            conversation_id=conversation_id,
            message_id=message_id,
            expected=body.expected,
            vault_key=request.app.state.vault_key,
        )
    return CaseOut.of(info)


@routes.get("/evals/cases", responses=error_responses(403))
def cases(
    user: CurrentUser,
    request: Request,
    status: Annotated[
        Status | None, Query(max_length=7, description="Only cases in this state.")
    ] = None,
) -> CaseList:
    """The owner's cases (newest first), then the shipped starter set, with their results."""
    _owner(user)
    shipped = [
        CaseOut(
            id=case.id,
            source="shipped",
            status="kept",
            title=case.title,
            conversation_id=None,
            message_id=None,
            owner_words=case.owner_words,
            failed_reply=case.failed_reply,
            checker=case.checker.to_dict(),
            created_at=None,
        )
        for case in load_shipped(STARTER_DIR)
    ]
    with database_of(request).read() as session:
        found = [CaseOut.of(info) for info in list_cases(session, user.id, status)]
        if status in (None, "kept"):
            found += shipped
        results = results_of(session, [case.id for case in found])
    by_case: dict[str, list[ResultOut]] = {}
    for result in results:
        by_case.setdefault(result.case_id, []).append(
            ResultOut.model_validate(result, from_attributes=True)
        )
    for case in found:
        case.results = by_case.get(case.id, [])
    models = sorted({result.model for result in results})
    return CaseList(cases=found, models=models)


@routes.get("/evals/cases/{case_id}", responses=error_responses(403, 404))
def case(case_id: PathId, user: CurrentUser, request: Request) -> CaseOut:
    """One of the owner's cases, with the history and tool results it keeps."""
    _owner(user)
    with database_of(request).read() as session:
        return CaseOut.of(get_case(session, case_id, user.id), full=True)


@routes.patch("/evals/cases/{case_id}", responses=error_responses(403, 404, 422))
def edit_case(case_id: PathId, body: CaseEdit, user: CurrentUser, request: Request) -> CaseOut:
    """Replace a case's checker, keep or drop it, or retitle it."""
    _owner(user)
    checker = None
    if body.checker is not None:
        try:
            checker = Checker.from_dict(body.checker).to_dict()
        except CaseError as error:
            raise Invalid(f"checker: {error}") from None
    with database_of(request).write() as session:
        info = update_case(
            session, case_id, user.id, checker=checker, status=body.status, title=body.title
        )
    return CaseOut.of(info, full=True)
