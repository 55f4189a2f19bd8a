"""The sends outbox: an irreversible send's intent, stored before the provider is called, and
its result (safety/sends.py performs the send)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.row_views import view_of
from nightowl.store.tables import SendRecord, utcnow


@dataclass(frozen=True)
class SendIntent:
    """What is about to be sent, and from which turn and tool."""

    owner_id: str
    conversation_id: str
    turn_id: str
    tool: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class SendInfo:
    """A stored send: `status` is intent (not known to have gone out), sent or failed."""

    idempotency_key: str
    owner_id: str
    conversation_id: str
    turn_id: str
    tool: str
    payload: dict[str, Any]
    status: str
    provider_id: str | None
    error: str | None
    created_at: datetime
    sent_at: datetime | None


def _info(row: SendRecord) -> SendInfo:
    return view_of(SendInfo, row, payload=dict(row.payload))


def record_send_intent(session: Session, key: str, intent: SendIntent) -> SendInfo | None:
    """The send stored earlier under `key`, or None after storing this intent (a new key)."""
    row = session.get(SendRecord, key)
    if row is not None:
        return _info(row)
    session.add(SendRecord(idempotency_key=key, status="intent", **vars(intent)))
    return None


def record_send_result(
    session: Session, key: str, provider_id: str | None, error: str | None
) -> None:
    """The send went out (`provider_id`) or failed (`error`)."""
    row = session.get(SendRecord, key)
    assert row is not None
    row.status = "sent" if provider_id else "failed"
    row.provider_id, row.error = provider_id, error
    row.sent_at = utcnow() if provider_id else None


def sends_of(session: Session, owner_id: str) -> list[SendInfo]:
    """The owner's sends, newest first."""
    rows = session.scalars(
        select(SendRecord)
        .where(SendRecord.owner_id == owner_id)
        .order_by(SendRecord.created_at.desc())
    )
    return [_info(row) for row in rows]
