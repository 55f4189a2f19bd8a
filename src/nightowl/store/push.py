"""Web Push in the store: devices (subscriptions), settings, and the deliveries outbox.

A push is decided in the transaction that stores the message (`plan_pushes`, called by
`append_messages`): one `push_deliveries` row per device, keyed by message and device, so a
crash can neither lose the decision nor double it. The sender (channels/webpush.py) claims due
rows, checks the item still waits on its person, and sends each once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from nightowl.store.errors import NotFound
from nightowl.store.ids import new_id
from nightowl.store.notices import notice_kind
from nightowl.store.row_views import view_of
from nightowl.store.tables import (
    Conversation,
    Message,
    PushDelivery,
    PushSettings,
    PushSubscription,
    utcnow,
)

# How long a claimed delivery is left to its sender before another may try (a sender that
# died mid-send: the push may go twice, never zero times).
CLAIM_S = 60.0


@dataclass(frozen=True)
class SubscriptionInfo:
    """A device that takes pushes."""

    id: str
    user_id: str
    endpoint: str
    p256dh: str
    auth: str
    device: str
    created_at: datetime


@dataclass(frozen=True)
class Settings:
    """A user's push settings."""

    quiet_start: str | None = None
    quiet_end: str | None = None
    timezone: str = "UTC"
    include_text: bool = False


@dataclass(frozen=True)
class DuePush:
    """A claimed delivery with what the sender needs to build and send it."""

    key: str
    message_id: str
    user_id: str
    urgent: bool
    attempts: int
    subscription: SubscriptionInfo
    conversation_id: str
    conversation_title: str
    body: str
    kind: str  # approval | question | draft | failed_turn | update


def push_reason(role: str, server_key: str | None, meta: dict[str, Any]) -> str | None:
    """Why a new message deserves a push: `deadline` (goes through quiet hours), `update`
    (an important message, a failed turn), or None (most messages: never pushed)."""
    controls = meta.get("controls") or {}
    if isinstance(controls, dict) and controls.get("deadline"):
        return "deadline"
    if role == "agent" and meta.get("important"):
        return "update"
    if role == "notice" and notice_kind(server_key) == "failed_turn":
        return "update"
    return None


def plan_pushes(session: Session, owner_id: str, messages: list[Any]) -> bool:
    """Record a delivery per device of `owner_id` for each message that deserves a push (in the
    caller's transaction: the message and its pushes commit together); whether any was."""
    worthy = [(m, push_reason(m.role, m.server_key, m.meta or {})) for m in messages]
    worthy = [(m, reason) for m, reason in worthy if reason is not None]
    if not worthy:
        return False
    devices = session.execute(
        select(PushSubscription.id).where(PushSubscription.user_id == owner_id)
    ).all()
    if not devices:
        return False
    now = utcnow()
    session.execute(
        insert(PushDelivery),
        [
            {
                "key": f"{message.id}:{device.id}",
                "message_id": message.id,
                "subscription_id": device.id,
                "user_id": owner_id,
                "urgent": reason == "deadline",
                "status": "pending",
                "attempts": 0,
                "not_before": now,
                "created_at": now,
            }
            for message, reason in worthy
            for device in devices
        ],
    )
    return True


def _subscription(row: PushSubscription) -> SubscriptionInfo:
    return view_of(SubscriptionInfo, row)


def subscribe(
    session: Session, user_id: str, endpoint: str, p256dh: str, auth: str, device: str
) -> SubscriptionInfo:
    """Keep a device's subscription (the same endpoint again updates it, for this user)."""
    row = session.scalar(select(PushSubscription).where(PushSubscription.endpoint == endpoint))
    if row is None:
        row = PushSubscription(
            id=new_id("push"), user_id=user_id, endpoint=endpoint, p256dh=p256dh, auth=auth
        )
        session.add(row)
    row.user_id, row.p256dh, row.auth, row.device = user_id, p256dh, auth, device
    session.flush()
    return _subscription(row)


def subscriptions_of(session: Session, user_id: str) -> list[SubscriptionInfo]:
    """The user's devices, oldest first."""
    rows = session.scalars(
        select(PushSubscription)
        .where(PushSubscription.user_id == user_id)
        .order_by(PushSubscription.created_at)
    )
    return [_subscription(row) for row in rows]


def unsubscribe(session: Session, user_id: str, subscription_id: str) -> None:
    """Forget a device of the user (NotFound for anyone else's)."""
    gone = session.execute(
        delete(PushSubscription).where(
            PushSubscription.id == subscription_id, PushSubscription.user_id == user_id
        )
    )
    if not getattr(gone, "rowcount", 0):
        raise NotFound(f"no push subscription {subscription_id!r}")


def forget_device(session: Session, subscription_id: str) -> None:
    """The push service says the subscription is gone (404/410): drop it and its pushes."""
    session.execute(delete(PushDelivery).where(PushDelivery.subscription_id == subscription_id))
    session.execute(delete(PushSubscription).where(PushSubscription.id == subscription_id))


def settings_of(session: Session, user_id: str) -> Settings:
    """The user's push settings (defaults until they set some)."""
    row = session.get(PushSettings, user_id)
    if row is None:
        return Settings()
    return view_of(Settings, row)


def save_settings(session: Session, user_id: str, settings: Settings) -> Settings:
    """Replace the user's push settings."""
    row = session.get(PushSettings, user_id)
    if row is None:
        row = PushSettings(user_id=user_id)
        session.add(row)
    row.quiet_start, row.quiet_end = settings.quiet_start, settings.quiet_end
    row.timezone, row.include_text = settings.timezone, settings.include_text
    row.updated_at = utcnow()
    session.flush()
    return settings


def quiet_until(settings: Settings, now: datetime) -> datetime | None:
    """When the quiet hours that contain `now` end, or None outside quiet hours."""
    if not settings.quiet_start or not settings.quiet_end:
        return None
    zone = ZoneInfo(settings.timezone)
    local = now.astimezone(zone)
    start, end = time.fromisoformat(settings.quiet_start), time.fromisoformat(settings.quiet_end)
    at = local.time().replace(tzinfo=None)
    inside = (start <= at < end) if start <= end else (at >= start or at < end)
    if not inside:
        return None
    ends = local.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    if ends <= local:
        ends += timedelta(days=1)
    return ends


def claim_due(
    session: Session, now: datetime, created_before: datetime, limit: int = 20
) -> list[DuePush]:
    """Claim pending deliveries that are due (each for `CLAIM_S`: a claim that dies expires)."""
    rows = session.execute(
        select(PushDelivery, PushSubscription, Message, Conversation.title)
        .join(PushSubscription, PushSubscription.id == PushDelivery.subscription_id)
        .join(Message, Message.id == PushDelivery.message_id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            PushDelivery.status == "pending",
            PushDelivery.not_before <= now,
            PushDelivery.created_at <= created_before,
        )
        .order_by(PushDelivery.not_before)
        .limit(limit)
    ).all()
    claimed = []
    for delivery, device, message, title in rows:
        taken = session.execute(
            update(PushDelivery)
            .where(
                PushDelivery.key == delivery.key,
                PushDelivery.status == "pending",
                PushDelivery.not_before == delivery.not_before,
            )
            .values(not_before=now + timedelta(seconds=CLAIM_S))
        )
        if not getattr(taken, "rowcount", 0):
            continue  # another sender took it
        claimed.append(
            view_of(
                DuePush,
                delivery,
                message_id=message.id,
                subscription=_subscription(device),
                conversation_id=message.conversation_id,
                conversation_title=title or "",
                body=message.body,
                kind=_kind(message),
            )
        )
    return claimed


def _kind(message: Message) -> str:
    controls = (message.meta or {}).get("controls") or {}
    if controls.get("ask") == "approval":
        return "approval"
    if "draft" in controls:
        return "draft"
    if controls:
        return "question"
    return notice_kind(message.server_key) or "update"


def mark_sent(session: Session, key: str, subscription_id: str) -> None:
    """The push service took the push."""
    now = utcnow()
    session.execute(
        update(PushDelivery)
        .where(PushDelivery.key == key)
        .values(status="sent", sent_at=now, attempts=PushDelivery.attempts + 1)
    )
    session.execute(
        update(PushSubscription)
        .where(PushSubscription.id == subscription_id)
        .values(last_sent_at=now)
    )


def mark_done(session: Session, key: str, status: str, error: str | None = None) -> None:
    """The delivery ends without a push: `dropped` (the item left first) or `failed`."""
    session.execute(
        update(PushDelivery).where(PushDelivery.key == key).values(status=status, error=error)
    )


def retry_later(session: Session, key: str, at: datetime, error: str) -> None:
    """Try again at `at` (the push service was busy, or the quiet hours hold it)."""
    session.execute(
        update(PushDelivery)
        .where(PushDelivery.key == key)
        .values(not_before=at, error=error, attempts=PushDelivery.attempts + 1)
    )


def hold_until(session: Session, key: str, at: datetime) -> None:
    """Hold the delivery until `at` (quiet hours), without counting an attempt."""
    session.execute(update(PushDelivery).where(PushDelivery.key == key).values(not_before=at))
