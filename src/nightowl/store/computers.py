"""Each user's computer as stored: its host uid, whether it sleeps, and its last snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nightowl.store.tables import Computer, utcnow


@dataclass(frozen=True)
class ComputerRecord:
    """What the store knows of one user's sandbox."""

    user_id: str
    uid: int
    state: str
    snapshot: str | None
    snapshot_bytes: int
    snapshot_at: datetime | None


def _record(row: Computer) -> ComputerRecord:
    return ComputerRecord(
        row.user_id, row.uid, row.state, row.snapshot, row.snapshot_bytes, row.snapshot_at
    )


def computer_of(session: Session, user_id: str, uid_base: int) -> ComputerRecord:
    """The user's computer, given the next free host uid from `uid_base` when new."""
    row = session.get(Computer, user_id)
    if row is None:
        highest = session.scalar(select(func.max(Computer.uid)))
        row = Computer(user_id=user_id, uid=max(uid_base, (highest or uid_base - 1) + 1))
        row.state, row.snapshot_bytes = "awake", 0
        session.add(row)
        session.flush()
    return _record(row)


def record_sleep(session: Session, user_id: str, snapshot: str, size: int) -> None:
    """The home now lives in `snapshot` only (written before the home is removed)."""
    row = session.get(Computer, user_id)
    assert row is not None
    row.state = "asleep"
    row.snapshot, row.snapshot_bytes, row.snapshot_at = snapshot, size, utcnow()


def record_snapshot(session: Session, user_id: str, snapshot: str, size: int) -> None:
    """A snapshot was taken while the home stays on disk."""
    row = session.get(Computer, user_id)
    assert row is not None
    row.snapshot, row.snapshot_bytes, row.snapshot_at = snapshot, size, utcnow()


def record_awake(session: Session, user_id: str) -> None:
    """The home is back on disk."""
    row = session.get(Computer, user_id)
    assert row is not None
    row.state = "awake"


def list_computers(session: Session) -> list[ComputerRecord]:
    """Every user's computer."""
    return [_record(r) for r in session.scalars(select(Computer).order_by(Computer.uid))]
