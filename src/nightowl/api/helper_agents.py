"""Helper routes: the owner's view of a conversation's helpers (status, progress, cost) and
their Stop button."""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, Request
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import error_responses
from nightowl.api.inputs import PathId
from nightowl.store.conversations import get_conversation
from nightowl.store.errors import NotFound
from nightowl.store.helper_agents import (
    ACTIVE,
    HelperInfo,
    helper_costs,
    helpers_of,
    helpers_of_owner,
)

routes = APIRouter(prefix="/v1", tags=["helpers"])


class HelperOut(BaseModel):
    """A helper of a conversation: what it works on, how far it got, what it cost."""

    id: str
    conversation_id: str  # the conversation it works for
    name: str | None
    kind: str
    status: str
    task: str
    progress: str
    report: str | None
    tokens: int
    cost_usd: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, helper: HelperInfo, spent: tuple[int, float]) -> HelperOut:
        # Shown from the parent's side: its conversation, and the task by its title.
        shown = {
            **vars(helper),
            "conversation_id": helper.parent_conversation_id,
            "task": helper.title,
        }
        return cls(**shown, tokens=spent[0], cost_usd=round(spent[1], 6))


def _helpers(request: Request, conversation_id: str, user_id: str) -> list[HelperOut]:
    with database_of(request).read() as session:
        get_conversation(session, conversation_id, user_id)  # the caller's, or 404
        found = helpers_of(session, conversation_id)
        costs = helper_costs(session, [h.conversation_id for h in found])
    return [HelperOut.of(h, costs.get(h.conversation_id, (0, 0.0))) for h in found]


@routes.get("/helpers")
def my_helpers(user: CurrentUser, request: Request) -> list[HelperOut]:
    """Every helper of the caller's conversations, newest first."""
    with database_of(request).read() as session:
        found = helpers_of_owner(session, user.id)
        costs = helper_costs(session, [h.conversation_id for h in found])
    return [HelperOut.of(h, costs.get(h.conversation_id, (0, 0.0))) for h in found]


@routes.get("/conversations/{conversation_id}/helpers", responses=error_responses(404))
def conversation_helpers(
    conversation_id: PathId, user: CurrentUser, request: Request
) -> list[HelperOut]:
    """The conversation's helpers, oldest first."""
    return _helpers(request, conversation_id, user.id)


@routes.post(
    "/conversations/{conversation_id}/helpers/{helper_id}/stop", responses=error_responses(404)
)
async def stop_helper(
    conversation_id: PathId, helper_id: PathId, user: CurrentUser, request: Request
) -> HelperOut:
    """Stop a working helper (a finished one is left as it is); its parent hears of it."""

    def find() -> HelperInfo:
        with database_of(request).read() as session:
            get_conversation(session, conversation_id, user.id)
            for helper in helpers_of(session, conversation_id):
                if helper.id == helper_id:
                    return helper
        raise NotFound(f"no helper {helper_id!r} in this conversation")

    helper = await asyncio.to_thread(find)
    if helper.status in ACTIVE:
        await asyncio.to_thread(request.app.state.router.stop_helpers, [helper.run_id])
    found = await asyncio.to_thread(_helpers, request, conversation_id, user.id)
    return next(h for h in found if h.id == helper_id)
