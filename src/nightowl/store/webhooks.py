"""Inbound webhooks: each has a secret and feeds one conversation of its owner."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nightowl.store.conversations import create_conversation
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.tables import Trigger, Webhook, WebhookSignature, utcnow


@dataclass(frozen=True)
class WebhookInfo:
    """A webhook without its secret."""

    id: str
    owner_id: str
    name: str
    conversation_id: str
    created_at: datetime


def _info(row: Webhook) -> WebhookInfo:
    return WebhookInfo(row.id, row.owner_id, row.name, row.conversation_id, row.created_at)


def create_hook(session: Session, owner_id: str, name: str) -> tuple[WebhookInfo, str]:
    """A new webhook and its own conversation; the secret is returned (show it once)."""
    name = name.strip()
    if not name or len(name) > 200:
        raise Invalid("a webhook needs a name of 1 to 200 characters")
    conversation = create_conversation(
        session, owner_id, kind="direct", channel="webhook", title=f"Webhook: {name}"
    )
    secret = "whsec_" + secrets.token_urlsafe(32)
    row = Webhook(
        id=new_id("hook"),
        owner_id=owner_id,
        name=name,
        secret=secret,
        conversation_id=conversation.id,
    )
    session.add(row)
    session.flush()
    return _info(row), secret


def list_hooks(session: Session, owner_id: str) -> list[WebhookInfo]:
    """The owner's webhooks, oldest first."""
    rows = session.scalars(
        select(Webhook).where(Webhook.owner_id == owner_id).order_by(Webhook.created_at)
    )
    return [_info(row) for row in rows]


def delete_hook(session: Session, owner_id: str, hook_id: str) -> None:
    """Delete a webhook (its conversation stays); later deliveries are refused."""
    done = session.execute(
        delete(Webhook).where(Webhook.id == hook_id, Webhook.owner_id == owner_id)
    )
    if not getattr(done, "rowcount", 0):
        raise NotFound(f"no webhook {hook_id!r}")


def hook_secret(session: Session, hook_id: str) -> tuple[WebhookInfo, str] | None:
    """A webhook and its secret, for verifying a delivery."""
    row = session.get(Webhook, hook_id)
    return None if row is None else (_info(row), row.secret)


def remember_signature(
    session: Session, hook_id: str, digest: str, delivery: str, window_s: float
) -> str:
    """Record a signed delivery (by the digest of what its signature covers) and return the
    delivery id it was first seen with: another id means the signed body was replayed.
    Records older than twice the signature window are forgotten on the way."""
    now = utcnow()
    session.execute(
        delete(WebhookSignature).where(
            WebhookSignature.hook_id == hook_id,
            WebhookSignature.seen_at < now - timedelta(seconds=2 * window_s),
        )
    )
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(
        dialect.insert(WebhookSignature)
        .values(hook_id=hook_id, digest=digest, delivery=delivery, seen_at=now)
        .on_conflict_do_nothing(index_elements=[WebhookSignature.hook_id, WebhookSignature.digest])
    )
    first = session.scalar(
        select(WebhookSignature.delivery).where(
            WebhookSignature.hook_id == hook_id, WebhookSignature.digest == digest
        )
    )
    return str(first)


def deliveries_of(session: Session, hook_id: str) -> tuple[int, str]:
    """How many deliveries a webhook has had (as long as their triggers are kept), and the
    key of the newest ('' when none)."""
    keys = Trigger.idempotency_key.startswith(f"{hook_id}:", autoescape=True)
    mine = (Trigger.source == "webhook", keys)
    count = session.scalar(select(func.count()).select_from(Trigger).where(*mine)) or 0
    newest = session.scalars(
        select(Trigger.idempotency_key)
        .where(*mine)
        .order_by(Trigger.received_at.desc(), Trigger.idempotency_key.desc())
        .limit(1)
    ).first()
    return int(count), newest or ""


def owned_hook(session: Session, owner_id: str, hook_id: str) -> WebhookInfo:
    """The owner's webhook; NotFound when there is none by that id."""
    row = session.get(Webhook, hook_id)
    if row is None or row.owner_id != owner_id:
        raise NotFound(f"no webhook {hook_id!r}; list yours with `nightowl hooks list`")
    return _info(row)
