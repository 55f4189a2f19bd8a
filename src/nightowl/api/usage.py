"""`GET /v1/usage`: what the models cost the caller, per day, conversation and routine."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Query, Request

from nightowl.api.auth import CurrentUser, database_of
from nightowl.store.tables import utcnow
from nightowl.store.usage import usage_report

routes = APIRouter(prefix="/v1/usage", tags=["usage"])


def since_days(days: int, now: datetime | None = None) -> datetime:
    """Midnight (UTC) `days - 1` days ago: `days=1` is today."""
    now = now or utcnow()
    return datetime.combine(now.date(), datetime.min.time(), now.tzinfo) - timedelta(days=days - 1)


@routes.get("")
async def my_usage(
    user: CurrentUser,
    request: Request,
    days: int = Query(default=7, ge=1, le=366, description="Today and the days before it."),
) -> dict[str, Any]:
    """Tokens (input, cache read, cache write, output), cost in USD and the cached share of
    input, in total and per day, per conversation and per routine."""
    database = database_of(request)

    def report() -> dict[str, Any]:
        with database.read() as session:
            return usage_report(session, user.id, since_days(days))

    return await asyncio.to_thread(report)
