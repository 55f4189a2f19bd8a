"""Routine routes: the owner creates, approves, pauses, resumes, lists and deletes routines."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import Id, PathId, RequestBody, SafeText
from nightowl.engine.routines import RoutineSchedules
from nightowl.harness.done_when import DoneWhen
from nightowl.harness.watches import Watch
from nightowl.store.conversations import create_conversation
from nightowl.store.routine_firings import FiringInfo, firings_of, outcome_counts
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
    catch_up: Literal["latest", "all", "none"] = Field(
        default="latest",
        description=(
            "Due times missed while the server was down: one firing for all of them, told how "
            "many (latest), each fired late (all), or each recorded as skipped (none)."
        ),
    )
    watch: Watch | None = Field(
        default=None,
        description=(
            "A check made without the model before each firing: when what it watches is "
            "unchanged, the firing is skipped (0 model tokens); when it changed, the turn is "
            "told what changed."
        ),
    )
    done_when: DoneWhen | None = Field(
        default=None,
        description=(
            "What done means for a run, checked when its turn ends: a run without it is "
            "recorded as `failed: not done …` and the next run is told."
        ),
    )
    quiet_hours: Literal["run", "skip"] = Field(
        default="run",
        description=(
            "A due time inside your quiet hours (push settings): run it, its messages waiting "
            "for the quiet hours to end (run), or record it as skipped and run nothing (skip)."
        ),
    )


class Outcomes(BaseModel):
    """How many of a routine's due times ran, were skipped, failed, or are being run."""

    ran: int = 0
    skipped: int = 0
    failed: int = 0
    pending: int = 0


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
    catch_up: str = "latest"
    watch: Watch | None = None
    done_when: DoneWhen | None = None
    quiet_hours: str = "run"
    outcomes: Outcomes = Outcomes()

    @classmethod
    def of(cls, info: RoutineInfo, counts: dict[str, int] | None = None) -> RoutineOut:
        return cls(**vars(info), outcomes=Outcomes(**(counts or {})))


class FiringOut(BaseModel):
    """One due time of a routine and what became of it."""

    due_at: datetime
    outcome: str = Field(description="pending (being run), ran, skipped or failed")
    reason: str = Field(description="why it was skipped or failed ('' when it ran)")
    missed: int = Field(description="missed due times a catch-up firing stood for")
    late: bool = Field(description="fired after its time (catch_up all)")
    message_id: str | None
    turn_id: str | None = Field(description="the turn its message woke, once one took it")
    recorded_at: datetime

    @classmethod
    def of(cls, info: FiringInfo) -> FiringOut:
        return cls(**info.__dict__)


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
            catch_up=body.catch_up,
            watch=body.watch,
            done_when=body.done_when,
            quiet_hours=body.quiet_hours,
            # A member's routine is the member's: it fires with their trust, not the owner's.
            created_by="owner" if user.role == "owner" else "member",
        )
    _schedules(request).apply(info)
    return RoutineOut.of(info)


@routes.get("")
def my_routines(user: CurrentUser, request: Request) -> list[RoutineOut]:
    """The caller's routines, including those waiting for approval."""
    with database_of(request).read() as session:
        routines = list_routines(session, user.id)
        counts = outcome_counts(session, [r.id for r in routines])
        return [RoutineOut.of(info, counts[info.id]) for info in routines]


@routes.get("/{routine_id}/firings", responses=error_responses(404))
def routine_firings(
    routine_id: PathId,
    user: CurrentUser,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[FiringOut]:
    """The routine's due times, newest first, each with its outcome: ran (and the turn it
    woke), skipped (paused, superseded by a catch-up, missed) or failed (why)."""
    with database_of(request).read() as session:
        get_routine(session, routine_id, user.id)
        return [FiringOut.of(f) for f in firings_of(session, routine_id, limit)]


def _change(routine_id: PathId, status: str, user_id: str, request: Request) -> RoutineOut:
    with database_of(request).write() as session:
        info = set_status(session, routine_id, user_id, status)
        counts = outcome_counts(session, [info.id])[info.id]
    _schedules(request).apply(info)
    return RoutineOut.of(info, counts)


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
