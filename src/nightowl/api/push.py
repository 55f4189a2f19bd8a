"""Web Push routes: the server's public key, a user's devices, and their push settings."""

from __future__ import annotations

from datetime import datetime, time
from typing import Annotated
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Request, Response
from pydantic import AfterValidator, BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId, RequestBody, SafeText
from nightowl.channels.webpush import check_endpoint
from nightowl.store.push import (
    Settings,
    SubscriptionInfo,
    save_settings,
    settings_of,
    subscribe,
    subscriptions_of,
    unsubscribe,
)

routes = APIRouter(prefix="/v1/push", tags=["push"])


def _clock_time(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return time.fromisoformat(value).strftime("%H:%M")
    except ValueError:
        raise ValueError("must be a time of day as HH:MM, e.g. 22:00") from None


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("must be an IANA time zone, e.g. Europe/London") from None
    return value


ClockTime = Annotated[SafeText | None, Field(max_length=5), AfterValidator(_clock_time)]


class PublicKeyOut(BaseModel):
    """The server's VAPID public key: the browser's `applicationServerKey`."""

    public_key: str


class NewSubscription(RequestBody):
    """A device's PushSubscription (`endpoint` and `keys` of `subscription.toJSON()`)."""

    endpoint: SafeText = Field(min_length=1, max_length=1000)
    p256dh: SafeText = Field(min_length=1, max_length=200)
    auth: SafeText = Field(min_length=1, max_length=100)
    device: SafeText = Field(default="", max_length=200)


class SubscriptionOut(BaseModel):
    """A device that takes pushes (its endpoint's secret path is never shown back)."""

    id: str
    device: str
    service: str  # the push service's origin
    created_at: datetime

    @classmethod
    def of(cls, info: SubscriptionInfo) -> SubscriptionOut:
        parts = urlsplit(info.endpoint)
        return cls(
            id=info.id,
            device=info.device,
            service=f"{parts.scheme}://{parts.netloc}",
            created_at=info.created_at,
        )


class PushSettingsBody(RequestBody):
    """Quiet hours (only deadlines come through; both or neither), their time zone, and
    whether a push may carry the message's text (off: "nightowl needs you" and the title)."""

    quiet_start: ClockTime = None
    quiet_end: ClockTime = None
    timezone: Annotated[SafeText, Field(min_length=1, max_length=64), AfterValidator(_zone)] = "UTC"
    include_text: bool = False


@routes.get("/key")
def public_key(_user: CurrentUser, request: Request) -> PublicKeyOut:
    """The key a browser subscribes with (made at first start, kept in the data dir)."""
    return PublicKeyOut(public_key=request.app.state.vapid.public_key)


@routes.post("/subscriptions", status_code=201, responses=error_responses(422))
def add_subscription(body: NewSubscription, user: CurrentUser, request: Request) -> SubscriptionOut:
    """Keep this device's subscription (the same endpoint again replaces it)."""
    problem = check_endpoint(body.endpoint, request.app.state.settings.push_insecure_endpoints)
    if problem is not None:
        raise ApiError(422, "invalid_request", f"endpoint: {problem}")
    with database_of(request).write() as session:
        info = subscribe(session, user.id, body.endpoint, body.p256dh, body.auth, body.device)
    return SubscriptionOut.of(info)


@routes.get("/subscriptions")
def my_subscriptions(user: CurrentUser, request: Request) -> list[SubscriptionOut]:
    """The caller's devices that take pushes."""
    with database_of(request).read() as session:
        return [SubscriptionOut.of(s) for s in subscriptions_of(session, user.id)]


@routes.delete("/subscriptions/{subscription_id}", status_code=204, responses=error_responses(404))
def remove_subscription(subscription_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Stop pushing to a device."""
    with database_of(request).write() as session:
        unsubscribe(session, user.id, subscription_id)
    return Response(status_code=204)


@routes.get("/settings")
def my_settings(user: CurrentUser, request: Request) -> PushSettingsBody:
    """The caller's push settings."""
    with database_of(request).read() as session:
        found = settings_of(session, user.id)
    return PushSettingsBody(**vars(found))


@routes.put("/settings")
def put_settings(body: PushSettingsBody, user: CurrentUser, request: Request) -> PushSettingsBody:
    """Replace the caller's push settings."""
    if (body.quiet_start is None) != (body.quiet_end is None):
        raise ApiError(422, "invalid_request", "quiet_start and quiet_end: give both or neither")
    with database_of(request).write() as session:
        save_settings(
            session,
            user.id,
            Settings(body.quiet_start, body.quiet_end, body.timezone, body.include_text),
        )
    return body
