"""The server's edge: what every HTTP request passes before a route reads a byte of it.

In order: the source address's rate; then, for routes that need one, the access token (so a
stranger cannot make the server read a body) and that token's rate; then the body's size: a
declared Content-Length over the limit is refused at once, and a body that streams past it
is cut off where it crosses. Refusals use the common error shape: 401, 429 with Retry-After,
413 naming the limit. Webhook deliveries carry no token (their signature is checked by the
route, before it reads the body); they get the smaller webhook limit.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from fastapi import HTTPException
from sqlalchemy.exc import DBAPIError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nightowl.api.auth import invalid_token, missing_token
from nightowl.api.errors import RETRY_SOON, ApiError, database_unavailable, error_response
from nightowl.channels.webhooks import MAX_BODY_BYTES as MAX_WEBHOOK_BYTES
from nightowl.store.database import Database
from nightowl.store.outages import lost_connection
from nightowl.store.users import UserInfo, hash_token, user_for_token

# Routes anyone may call: the rest of /v1 and /metrics need a token.
_OPEN_PREFIXES = ("/healthz",)
# Routes whose POSTs are authenticated by their own signature check, not a token.
_SIGNED = ("/v1/hooks/", "/v1/ingress/")
MAX_INGRESS_BYTES = 1024 * 1024  # a channel service's event (Slack, Telegram: a few KiB)


@dataclass(frozen=True)
class EdgeLimits:
    """How much a request may carry and how often one may come (per minute; 0: no limit)."""

    max_body_bytes: int
    per_token_per_minute: int
    per_address_per_minute: int


class BodyTooLarge(HTTPException):
    """The body is, or went while it was read, past the limit (an HTTPException, so FastAPI's
    body parsing passes it on as it is)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over the limit of {limit} bytes; send less")


class RateLimit:
    """Token buckets, one per key, each holding a minute's worth of requests."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[str, tuple[float, float]] = {}  # key: (tokens, as of)

    def wait(self, key: str, now: float) -> float:
        """0 when a request under `key` may pass now (and count it), else seconds to wait."""
        if self.per_minute <= 0:
            return 0.0
        rate = self.per_minute / 60.0
        tokens, as_of = self._buckets.get(key, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - as_of) * rate)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / rate
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > 100_000:  # forget keys that have been idle for a minute
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60}
        return 0.0


def needs_token(method: str, path: str) -> bool:
    """Whether a request must carry an access token (webhook deliveries and a channel's
    events are signed instead)."""
    if path.startswith(_SIGNED) and method == "POST" and path.count("/") == 3:
        return False
    return path.startswith(("/v1/", "/docs", "/redoc")) or path == "/metrics"


def token_of(scope: Scope) -> str | None:
    """The bearer token of a request: its Authorization header, or `?access_token=`."""
    header = Headers(scope=scope).get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    tokens = query.get("access_token")
    return tokens[0] if tokens and tokens[0] else None


class Edge:
    """ASGI middleware: rate limits, the token, and the body's size, before any route runs."""

    def __init__(self, app: ASGIApp, limits: EdgeLimits) -> None:
        self.app = app
        self.limits = limits
        self.by_address = RateLimit(limits.per_address_per_minute)
        self.by_token = RateLimit(limits.per_token_per_minute)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(_OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        try:
            receive = await self._admit(scope, receive)
        except ApiError as refused:
            await error_response(refused, _retry_after(refused))(scope, receive, send)
            return
        except BodyTooLarge as refused:
            await error_response(_payload_too_large(refused))(scope, receive, send)
            return
        started = False

        async def noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, noting_start)
        except BodyTooLarge as refused:  # cut off outside a route's own error handling
            if started:
                raise
            await error_response(_payload_too_large(refused))(scope, receive, send)

    async def _admit(self, scope: Scope, receive: Receive) -> Receive:
        """The request's `receive`, bounded; or an ApiError saying why it may not pass."""
        now = time.monotonic()
        address = (scope.get("client") or ("unknown", 0))[0]
        _limited(self.by_address.wait(address, now), "this address")
        method, path = scope["method"], scope["path"]
        limit = self.limits.max_body_bytes
        if needs_token(method, path):
            token = token_of(scope)
            if not token:
                raise missing_token()
            database: Database = scope["app"].state.database
            try:
                user = await asyncio.to_thread(_user_for, database, token)
            except DBAPIError as error:
                if lost_connection(error):
                    raise database_unavailable() from error
                raise
            if user is None:
                raise invalid_token()
            _limited(self.by_token.wait(hash_token(token), now), "this token")
            scope.setdefault("state", {})["user"] = user  # current_user's answer (api/auth.py)
        elif path.startswith("/v1/hooks/"):
            limit = MAX_WEBHOOK_BYTES
        elif path.startswith("/v1/ingress/"):
            limit = MAX_INGRESS_BYTES
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        return _bounded(receive, limit)


def _user_for(database: Database, token: str) -> UserInfo | None:
    with database.read() as session:
        return user_for_token(session, token)


class _Limited(ApiError):
    def __init__(self, wait_s: float, whose: str) -> None:
        super().__init__(
            429,
            "rate_limited",
            f"too many requests from {whose}; try again in {math.ceil(wait_s)} s",
        )
        self.retry_after = math.ceil(wait_s)


def _limited(wait_s: float, whose: str) -> None:
    if wait_s > 0:
        raise _Limited(wait_s, whose)


def _payload_too_large(refused: BodyTooLarge) -> ApiError:
    return ApiError(413, "payload_too_large", str(refused.detail))


def _retry_after(refused: ApiError) -> dict[str, str] | None:
    if isinstance(refused, _Limited):
        return {"Retry-After": str(refused.retry_after)}
    if refused.status == 503:
        return RETRY_SOON
    return None


def _bounded(receive: Receive, limit: int) -> Receive:
    """`receive` that raises BodyTooLarge once the body has gone past `limit` bytes."""
    read = 0

    async def bounded() -> Message:
        nonlocal read
        message = await receive()
        if message["type"] == "http.request":
            read += len(message.get("body", b""))
            if read > limit:
                raise BodyTooLarge(limit)
        return message

    return bounded
