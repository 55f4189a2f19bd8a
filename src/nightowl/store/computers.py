"""Each user's computer as stored: its host uid, whether it sleeps, and its last snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, update
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


def computer_state(session: Session, user_id: str) -> str | None:
    """`awake` or `asleep` (its home only in a snapshot); None when it never ran."""
    return session.scalar(select(Computer.state).where(Computer.user_id == user_id))


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


def record_removed(session: Session, user_id: str) -> None:
    """The computer is gone (an isolated helper's): no snapshot to wake from, on no host.
    Its snapshots are content-addressed and may be another computer's too: they stay in the
    blob store."""
    session.execute(
        update(Computer)
        .where(Computer.user_id == user_id)
        .values(
            state="awake",
            snapshot=None,
            snapshot_bytes=0,
            snapshot_at=None,
            host=None,
            host_until=None,
        )
    )


def snapshot_references(session: Session) -> list[str]:
    """Every computer's last snapshot (`blob:<sha256>`): what a backup must keep."""
    found = session.scalars(
        select(Computer.snapshot).where(Computer.snapshot.is_not(None)).order_by(Computer.uid)
    )
    return [reference for reference in found if reference]


def list_computers(session: Session) -> list[ComputerRecord]:
    """Every user's computer."""
    return [_record(r) for r in session.scalars(select(Computer).order_by(Computer.uid))]


@dataclass(frozen=True)
class Placement:
    """Where a user's computer is awake (a computer tier), and until when the lease holds."""

    host: str | None
    until: datetime | None

    def held_by_other(self, host: str, now: datetime) -> bool:
        """Whether another host holds a lease that has not lapsed."""
        return self.host not in (None, host) and self.until is not None and self.until >= now


def placement_of(session: Session, user_id: str) -> Placement:
    """The host the user's computer is on now (host None: on none)."""
    row = session.get(Computer, user_id)
    return Placement(row.host, row.host_until) if row is not None else Placement(None, None)


def claim_placement(session: Session, user_id: str, host: str, lease_s: float) -> Placement | None:
    """Place the computer on `host` (or renew it there): the placement it had before, or None
    when another host holds a lease that has not lapsed (that host is alive: go there)."""
    now = utcnow()
    before = placement_of(session, user_id)
    taken = session.execute(
        update(Computer)
        .where(
            Computer.user_id == user_id,
            or_(Computer.host.is_(None), Computer.host == host, Computer.host_until < now),
        )
        .values(host=host, host_until=now + timedelta(seconds=lease_s))
    )
    return before if taken.rowcount else None  # type: ignore[attr-defined]


def renew_placements(session: Session, host: str, lease_s: float) -> int:
    """Extend the lease of every computer on `host` (its heartbeat); how many."""
    renewed = session.execute(
        update(Computer)
        .where(Computer.host == host)
        .values(host_until=utcnow() + timedelta(seconds=lease_s))
    )
    return int(renewed.rowcount)  # type: ignore[attr-defined]


def release_placement(session: Session, user_id: str, host: str) -> None:
    """The computer left `host` (it sleeps): it may wake on any host at once."""
    session.execute(
        update(Computer)
        .where(Computer.user_id == user_id, Computer.host == host)
        .values(host=None, host_until=None)
    )
