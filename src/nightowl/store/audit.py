"""The audit log: every reviewed action, decision, approval, denial and send, once each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.row_views import view_of
from nightowl.store.tables import AuditEvent


@dataclass(frozen=True)
class AuditInfo:
    """One audit entry as the owner reads it."""

    id: int
    at: datetime
    conversation_id: str
    turn_id: str
    kind: str
    tool: str
    effect: str
    decision: str
    reason: str
    detail: dict[str, Any]


def record_audit_event(
    session: Session,
    key: str,
    *,
    owner_id: str,
    conversation_id: str,
    turn_id: str,
    kind: str,
    tool: str,
    effect: str,
    decision: str,
    reason: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    """Log an event once per `key` (derived from the step, so a re-run step never repeats it)."""
    if session.scalar(select(AuditEvent.id).where(AuditEvent.event_key == key)) is not None:
        return
    session.add(
        AuditEvent(
            event_key=key,
            owner_id=owner_id,
            conversation_id=conversation_id,
            turn_id=turn_id,
            kind=kind,
            tool=tool,
            effect=effect,
            decision=decision,
            reason=reason,
            detail=detail or {},
        )
    )
    session.flush()


def audit_log(
    session: Session,
    owner_id: str,
    *,
    conversation_id: str | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[AuditInfo]:
    """The owner's newest audit entries first (`before` an id pages back)."""
    query = select(AuditEvent).where(AuditEvent.owner_id == owner_id)
    if conversation_id:
        query = query.where(AuditEvent.conversation_id == conversation_id)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    rows = session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit))
    return [view_of(AuditInfo, row, detail=dict(row.detail or {})) for row in rows]
