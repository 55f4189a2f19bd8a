"""`GET /v1/report`: the autonomy report — per day, what the agent did without asking, what it
held for the owner and how the owner answered, and what the models cost by what woke them."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.usage import since_days
from nightowl.harness.report import SOURCES, autonomy_report
from nightowl.memory.memory_pass import MEMORY_STEP
from nightowl.store.report import action_events, spends
from nightowl.store.tables import utcnow

routes = APIRouter(prefix="/v1/report", tags=["report"])

# Model calls the server makes on its own inside a turn's records (the memory pass).
BACKGROUND_STEPS = frozenset({MEMORY_STEP})


class Actions(BaseModel):
    """Consequential calls (writes, sends, spends, shell commands)."""

    without_asking: int = Field(description="went ahead after the safety review, no question")
    held: int = Field(description="held for the owner's approval")
    approved: int
    denied: int
    expired: int = Field(description="no answer within the approval window: stayed blocked")


class Money(BaseModel):
    """Model tokens and dollars (calls of a model without a price are counted apart)."""

    tokens: int
    cost_usd: float
    unpriced_calls: int


class Period(BaseModel):
    actions: Actions
    median_answer_s: float | None = Field(
        description="median seconds from a question to the owner's approve or deny"
    )
    answers: int = Field(description="how many answers the median is over")
    tokens: int
    cost_usd: float
    by_source: dict[str, Money] = Field(description="one entry for each of: " + ", ".join(SOURCES))


class Day(Period):
    day: str = Field(description="a UTC date, YYYY-MM-DD")


class Report(BaseModel):
    first_day: str = Field(description="the report's first UTC date")
    days: list[Day] = Field(description="one per day, oldest first, quiet days included")
    total: Period


def report_of(session: Session, owner_id: str, days: int, now: datetime | None = None) -> Any:
    """The owner's report over today and the `days - 1` days before it (UTC)."""
    since = since_days(days, now or utcnow())
    return autonomy_report(
        action_events(session, owner_id, since),
        spends(session, owner_id, since, BACKGROUND_STEPS),
        since.date(),
        days,
    )


@routes.get("")
async def my_report(
    user: CurrentUser,
    request: Request,
    days: int = Query(default=7, ge=1, le=366, description="Today and the days before it."),
) -> Report:
    """Per day and in total: consequential actions done without asking, held, approved,
    denied and expired; the median time to an answer; tokens and dollars by source (direct,
    routines, webhooks, channels, timers, helpers, background, other)."""
    database = database_of(request)

    def build() -> Report:
        with database.read() as session:
            return Report.model_validate(report_of(session, user.id, days))

    return await asyncio.to_thread(build)
