"""Webhook management (owner, bearer token) and delivery (`POST /v1/hooks/{id}`, HMAC-signed)."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId, RequestBody, SafeText, describe_text_problem
from nightowl.channels.webhooks import (
    MAX_SKEW_SECONDS,
    freshness_problem,
    payload_text,
    signature_problem,
    signed_digest,
)
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.webhooks import (
    WebhookInfo,
    create_hook,
    delete_hook,
    hook_secret,
    list_hooks,
    remember_signature,
)

routes = APIRouter(tags=["webhooks"])


class NewHook(RequestBody):
    """Body of `POST /v1/hooks`."""

    name: SafeText = Field(min_length=1, max_length=200)


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
        return cls(**vars(info), url_path=f"/v1/hooks/{info.id}", secret=secret)


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
def remove_hook(hook_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Delete a webhook; its conversation stays."""
    with database_of(request).write() as session:
        delete_hook(session, user.id, hook_id)
    return Response(status_code=204)


class DeliveryOut(BaseModel):
    """Answer of a delivery: stored (or seen before) at `seq` of the hook's conversation."""

    accepted: bool
    duplicate: bool
    seq: int


# Printable ASCII: a delivery id is stored as part of the idempotency key.
_DELIVERY_ID = re.compile(r"^[\x20-\x7e]{1,200}$")
_PAYLOAD = {
    "content": {
        "application/json": {"schema": {}},
        "text/plain": {"schema": {"type": "string"}},
    },
    "description": "Any JSON or text, at most 256 KiB, signed as described in docs/webhooks.md.",
}


@routes.post(
    "/v1/hooks/{hook_id}",
    status_code=202,
    openapi_extra={"requestBody": _PAYLOAD},
    responses=error_responses(400, 401, 404, 409, 413),
)
async def deliver(
    hook_id: PathId,
    request: Request,
    x_nightowl_timestamp: Annotated[
        str | None, Header(description="Unix seconds when the delivery was signed.")
    ] = None,
    x_nightowl_signature: Annotated[
        str | None, Header(description="sha256=<hex HMAC-SHA256 of '<timestamp>.<body>'>")
    ] = None,
    x_nightowl_delivery: Annotated[
        str | None, Header(description="The sender's unique id of this event (1-200 chars).")
    ] = None,
) -> DeliveryOut:
    """A signed delivery: stored once per delivery id, as untrusted content."""
    # Nothing is read from a delivery that cannot be authentic: the headers and the hook are
    # checked first, and the edge bounds the body (api/edge.py).
    stale = freshness_problem(x_nightowl_timestamp, x_nightowl_signature, time.time())
    if stale is not None:
        raise ApiError(401, "bad_signature", stale)
    database = database_of(request)

    def lookup() -> tuple[WebhookInfo, str] | None:
        with database.read() as session:
            return hook_secret(session, hook_id)

    found = await asyncio.to_thread(lookup)
    if found is None:
        raise ApiError(404, "not_found", f"no webhook {hook_id!r}")
    hook, secret = found
    body = await request.body()
    problem = signature_problem(
        secret, x_nightowl_timestamp, x_nightowl_signature, body, time.time()
    )
    if problem is not None:
        raise ApiError(401, "bad_signature", problem)
    delivery = (x_nightowl_delivery or "").strip()
    if not _DELIVERY_ID.match(delivery):
        raise ApiError(
            400,
            "missing_delivery_id",
            "send a unique X-Nightowl-Delivery header (1-200 printable ASCII characters)",
        )
    text = payload_text(body, request.headers.get("content-type", ""))
    unstorable = describe_text_problem(text)
    if unstorable is not None:
        raise ApiError(422, "invalid_payload", f"the payload {unstorable}")
    digest = signed_digest(str(x_nightowl_timestamp), body)

    def first_seen_as() -> str:
        with database.write() as session:
            return remember_signature(session, hook.id, digest, delivery, MAX_SKEW_SECONDS)

    if await asyncio.to_thread(first_seen_as) != delivery:
        raise ApiError(
            409,
            "replayed",
            "this signed delivery was already received under another X-Nightowl-Delivery id; "
            "a new event needs a new signature",
        )
    router: Router = request.app.state.router
    incoming = IncomingMessage(
        source="webhook",
        idempotency_key=f"{hook.id}:{delivery}",
        conversation_id=hook.conversation_id,
        text=text,
        trust="untrusted",
        priority=Priority.WEBHOOK,
    )
    accepted = await asyncio.to_thread(router.accept, incoming)
    return DeliveryOut(accepted=True, duplicate=accepted.duplicate, seq=accepted.message.seq)
