"""Webhook management (owner, bearer token) and delivery (`POST /v1/hooks/{id}`, HMAC-signed)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError
from nightowl.channels.webhooks import MAX_BODY_BYTES, payload_text, signature_problem
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.webhooks import WebhookInfo, create_hook, delete_hook, hook_secret, list_hooks

routes = APIRouter(tags=["webhooks"])


class NewHook(BaseModel):
    """Body of `POST /v1/hooks`."""

    name: str = Field(min_length=1, max_length=200)


class HookOut(BaseModel):
    """A webhook; `secret` is only present in the answer that created it."""

    id: str
    name: str
    conversation_id: str
    url_path: str
    created_at: datetime
    secret: str | None = None

    @classmethod
    def of(cls, info: WebhookInfo, secret: str | None = None) -> HookOut:
        return cls(
            id=info.id,
            name=info.name,
            conversation_id=info.conversation_id,
            url_path=f"/v1/hooks/{info.id}",
            created_at=info.created_at,
            secret=secret,
        )


@routes.post("/v1/hooks", status_code=201)
def make_hook(body: NewHook, user: CurrentUser, request: Request) -> HookOut:
    """Create a webhook with its own secret and conversation (the secret is shown only now)."""
    with database_of(request).write() as session:
        info, secret = create_hook(session, user.id, body.name)
    return HookOut.of(info, secret)


@routes.get("/v1/hooks")
def my_hooks(user: CurrentUser, request: Request) -> list[HookOut]:
    """The caller's webhooks (without secrets)."""
    with database_of(request).read() as session:
        return [HookOut.of(info) for info in list_hooks(session, user.id)]


@routes.delete("/v1/hooks/{hook_id}", status_code=204)
def remove_hook(hook_id: str, user: CurrentUser, request: Request) -> Response:
    """Delete a webhook; its conversation stays."""
    with database_of(request).write() as session:
        delete_hook(session, user.id, hook_id)
    return Response(status_code=204)


@routes.post("/v1/hooks/{hook_id}", status_code=202)
async def deliver(hook_id: str, request: Request) -> dict[str, object]:
    """A signed delivery: stored once per delivery id, as untrusted content."""
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", f"payloads are limited to {MAX_BODY_BYTES} bytes")
    database = database_of(request)

    def lookup() -> tuple[WebhookInfo, str] | None:
        with database.read() as session:
            return hook_secret(session, hook_id)

    found = await asyncio.to_thread(lookup)
    if found is None:
        raise ApiError(404, "not_found", f"no webhook {hook_id!r}")
    hook, secret = found
    problem = signature_problem(
        secret,
        request.headers.get("x-nightowl-timestamp"),
        request.headers.get("x-nightowl-signature"),
        body,
        time.time(),
    )
    if problem is not None:
        raise ApiError(401, "bad_signature", problem)
    delivery = request.headers.get("x-nightowl-delivery", "").strip()
    if not delivery or len(delivery) > 200:
        raise ApiError(
            400, "missing_delivery_id", "send a unique X-Nightowl-Delivery header (1-200 chars)"
        )
    router: Router = request.app.state.router
    incoming = IncomingMessage(
        source="webhook",
        idempotency_key=f"{hook.id}:{delivery}",
        conversation_id=hook.conversation_id,
        text=payload_text(body, request.headers.get("content-type", "")),
        trust="untrusted",
        priority=Priority.WEBHOOK,
    )
    accepted = await asyncio.to_thread(router.accept, incoming)
    return {"accepted": True, "duplicate": accepted.duplicate, "seq": accepted.message.seq}
