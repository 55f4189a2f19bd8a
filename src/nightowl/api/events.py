"""`GET /v1/events`: Server-Sent Events that say *where* something changed, never what."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from nightowl.api.auth import CurrentUser
from nightowl.api.edge import token_of
from nightowl.api.revocation import token_watch_of
from nightowl.store.changes import ChangeFeed

routes = APIRouter(tags=["events"])
KEEPALIVE_SECONDS = 15.0


@routes.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-Sent Events: `event: change` with `data: {conversation_id, "
            "seq, kind}`, and a keepalive comment every 15 seconds.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def change_notifications(user: CurrentUser, request: Request) -> StreamingResponse:
    """A stream of `{conversation_id, seq, kind}` for the caller's conversations."""
    feed: ChangeFeed = request.app.state.changes
    watch = token_watch_of(request.app)
    token = token_of(request.scope) or ""

    async def stream() -> AsyncIterator[str]:
        # The stream ends within seconds of its token's revocation (api/revocation.py).
        with feed.subscription() as changes, watch.watching(token) as revoked:
            yield "retry: 1000\n: connected\n\n"
            while not revoked.is_set():
                change = await changes.next(KEEPALIVE_SECONDS, until=revoked)
                if revoked.is_set():
                    yield "event: revoked\ndata: {}\n\n"
                    return
                if change is None:
                    yield ": keepalive\n\n"
                    continue
                if change.owner_id != user.id:
                    continue
                data = {
                    "conversation_id": change.conversation_id,
                    "seq": change.seq,
                    "kind": change.kind,
                }
                yield f"event: change\ndata: {json.dumps(data)}\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
