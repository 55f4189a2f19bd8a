"""Routine routes: the owner creates, approves, pauses, resumes, lists and deletes routines."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import Id, PathId, RequestBody, SafeText
from nightowl.engine.routines import RoutineSchedules
from nightowl.store.conversations import create_conversation
from nightowl.store.routines import (
    RoutineInfo,
    create_routine,
    delete_routine,
    get_routine,
    list_routines,
    set_status,
)

routes = APIRouter(prefix="/v1/routines", tags=["routines"])


class NewRoutine(RequestBody):
    """Body of `POST /v1/routines`; without a conversation, the routine gets its own."""

    name: SafeText = Field(min_length=1, max_length=200)
    prompt: SafeText = Field(min_length=1, max_length=8_000)
    cron: SafeText = Field(min_length=1, max_length=100, examples=["0 8 * * 1-5"])
    timezone: SafeText = Field(default="UTC", min_length=1, max_length=64, examples=["UTC"])
    conversation_id: Id | None = None


class RoutineOut(BaseModel):
    """A routine."""

    id: str
    name: str
    prompt: str
    cron: str
    timezone: str
    status: str
    created_by: str
    conversation_id: str
    created_at: datetime
    last_fired_at: datetime | None
    trust: str = "owner"  # memory-trust: untrusted when proposed in a turn that read outside text

    @classmethod
    def of(cls, info: RoutineInfo) -> RoutineOut:
        return cls(
            id=info.id,
            name=info.name,
            prompt=info.prompt,
            cron=info.cron,
            timezone=info.timezone,
            status=info.status,
            created_by=info.created_by,
            conversation_id=info.conversation_id,
            created_at=info.created_at,
            last_fired_at=info.last_fired_at,
            trust=info.trust,
        )


def _schedules(request: Request) -> RoutineSchedules:
    schedules: RoutineSchedules = request.app.state.routines
    return schedules


@routes.post("", status_code=201, responses=error_responses(404))
def make_routine(body: NewRoutine, user: CurrentUser, request: Request) -> RoutineOut:
    """Create an active routine (the caller's own routines need no approval; it fires with
    the caller's trust)."""
    with database_of(request).write() as session:
        conversation_id = (
            body.conversation_id
            or create_conversation(
                session, user.id, channel="routine", title=f"Routine: {body.name}"
            ).id
        )
        info = create_routine(
            session,
            user.id,
            conversation_id,
            name=body.name,
            prompt=body.prompt,
            cron=body.cron,
            timezone=body.timezone,
            # A member's routine is the member's: it fires with their trust, not the owner's.
            created_by="owner" if user.role == "owner" else "member",
        )
    _schedules(request).apply(info)
    return RoutineOut.of(info)


@routes.get("")
def my_routines(user: CurrentUser, request: Request) -> list[RoutineOut]:
    """The caller's routines, including those waiting for approval."""
    with database_of(request).read() as session:
        return [RoutineOut.of(info) for info in list_routines(session, user.id)]


def _change(routine_id: PathId, status: str, user_id: str, request: Request) -> RoutineOut:
    with database_of(request).write() as session:
        info = set_status(session, routine_id, user_id, status)
    _schedules(request).apply(info)
    return RoutineOut.of(info)


@routes.post("/{routine_id}/approve")
def approve(routine_id: PathId, user: CurrentUser, request: Request) -> RoutineOut:
    """Approve a routine the agent proposed: it starts firing on its schedule."""
    return _change(routine_id, "active", user.id, request)


@routes.post("/{routine_id}/pause")
def pause(routine_id: PathId, user: CurrentUser, request: Request) -> RoutineOut:
    """Stop firing until resumed."""
    return _change(routine_id, "paused", user.id, request)


@routes.post("/{routine_id}/resume", responses=error_responses(409))
def resume(routine_id: PathId, user: CurrentUser, request: Request) -> RoutineOut:
    """Fire again on the schedule."""
    with database_of(request).read() as session:
        current = get_routine(session, routine_id, user.id)
    if current.status == "pending_approval":
        raise ApiError(409, "not_approved", "this routine waits for approval; approve it first")
    return _change(routine_id, "active", user.id, request)


@routes.delete("/{routine_id}", status_code=204)
def remove(routine_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Delete a routine and its schedule."""
    with database_of(request).write() as session:
        delete_routine(session, routine_id, user.id)
    _schedules(request).remove(routine_id)
    return Response(status_code=204)
