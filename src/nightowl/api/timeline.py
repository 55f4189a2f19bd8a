"""`GET /v1/conversations/{id}/turns/{turn id}/timeline`: why the agent did what it did —
each model call, tool run and safety decision of a turn, with timings, tokens, cache hits and
cost, from the store's own records (no trace server needed)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import error_responses
from nightowl.api.inputs import PathId
from nightowl.store.conversations import get_conversation
from nightowl.store.timeline import Timeline, turn_timeline

routes = APIRouter(prefix="/v1/conversations", tags=["conversations"])


class StepOut(BaseModel):
    """One step of a turn: a model call, a tool run or a safety decision."""

    kind: str
    at: datetime
    duration_ms: float | None
    name: str
    detail: dict[str, Any]


class TimelineOut(BaseModel):
    """A turn from what woke it to its end."""

    turn_id: str
    conversation_id: str
    status: str
    activity: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    woken_by: list[dict[str, Any]]
    steps: list[StepOut]
    totals: dict[str, Any]

    @classmethod
    def of(cls, timeline: Timeline) -> TimelineOut:
        steps = [StepOut(**vars(s)) for s in timeline.steps]
        return cls(**{**vars(timeline), "steps": steps})


@routes.get("/{conversation_id}/turns/{turn_id}/timeline", responses=error_responses(404))
async def timeline(
    conversation_id: PathId, turn_id: PathId, user: CurrentUser, request: Request
) -> TimelineOut:
    """The turn's steps in order, with their timings, tokens, cache hits, cost and safety
    decisions (no message text and no tool arguments)."""
    database = database_of(request)

    def read() -> Timeline:
        with database.read() as session:
            get_conversation(session, conversation_id, user.id)
            return turn_timeline(session, conversation_id, turn_id)

    return TimelineOut.of(await asyncio.to_thread(read))
