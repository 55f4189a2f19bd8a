"""`GET /v1/events`: Server-Sent Events that say *where* something changed, never what."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from nightowl.api.auth import CurrentUser
from nightowl.store.changes import Change, ChangeFeed

routes = APIRouter(tags=["events"])
KEEPALIVE_SECONDS = 15.0


@routes.get("/v1/events", response_class=StreamingResponse)
async def change_notifications(user: CurrentUser, request: Request) -> StreamingResponse:
    """A stream of `{conversation_id, seq, kind}` for the caller's conversations."""
    feed: ChangeFeed = request.app.state.changes
    changes = feed.subscribe()

    async def stream() -> AsyncIterator[str]:
        yield "retry: 1000\n: connected\n\n"
        pending: asyncio.Task[Change] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(changes))
                done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_SECONDS)
                if not done:
                    yield ": keepalive\n\n"
                    continue
                change = pending.result()
                pending = None
                if change.owner_id != user.id:
                    continue
                data = {
                    "conversation_id": change.conversation_id,
                    "seq": change.seq,
                    "kind": change.kind,
                }
                yield f"event: change\ndata: {json.dumps(data)}\n\n"
        finally:
            if pending is not None:
                pending.cancel()
            await changes.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
