"""Routine firings: one row per routine and due time, with its outcome (harness/firings.py).

A firing is claimed before it runs (`pending`), so a crash between the claim and its message
leaves a row that the next catch-up runs again (the message is keyed by the due time, so it is
stored once); the unique key makes two workers, a restart or a clock that jumps back claim one
due time once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from nightowl.harness.done_when import DoneWhen
from nightowl.harness.firings import Firing
from nightowl.store.ids import keyed_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import Message, Routine, RoutineFiring, utcnow

# How long a claimed firing is its claimer's alone: after it, a firing still pending was cut
# short (its process stopped) and the next firing or start-up runs it.
LEASE_S = 60.0


@dataclass(frozen=True)
class FiringInfo:
    """A due time's outcome as the owner sees it."""

    due_at: datetime
    outcome: str  # pending | ran | skipped | failed
    reason: str
    missed: int
    late: bool
    message_id: str | None
    turn_id: str | None
    recorded_at: datetime


def claim(session: Session, routine_id: str, firings: Sequence[Firing]) -> list[Firing]:
    """Record each planned firing unless its due time has an outcome already, move the
    routine's `accounted_until` forward, and return the firings still to be run (the ones
    planned `pending` now or left `pending` by a run that was cut short), oldest first."""
    if not firings:
        return []
    insert = postgres_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    now = utcnow()
    rows = [
        {
            "id": keyed_id("rfr", f"{routine_id}:{f.due.isoformat()}"),
            "routine_id": routine_id,
            "due_at": f.due,
            "outcome": f.outcome,
            "reason": f.reason,
            "missed": f.missed,
            "late": f.late,
            "recorded_at": now,
        }
        for f in firings
    ]
    # Only the rows this call inserted are this call's to run: a due time another worker (or
    # another firing of this process) claimed first is left to it.
    inserted = session.execute(
        insert(RoutineFiring)
        .values(rows)
        .on_conflict_do_nothing()
        .returning(RoutineFiring.due_at, RoutineFiring.outcome)
    ).all()
    newest = max(f.due for f in firings)
    session.execute(
        update(Routine)
        .where(Routine.id == routine_id)
        .where((Routine.accounted_until.is_(None)) | (Routine.accounted_until < newest))
        .values(accounted_until=newest)
    )
    mine = {_utc(due) for due, outcome in inserted if outcome == "pending"}
    return [f for f in sorted(firings, key=lambda f: f.due) if _utc(f.due) in mine]


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def left_pending(session: Session, routine_id: str, lease_s: float = LEASE_S) -> list[Firing]:
    """Firings claimed but never finished (the process stopped between claim and message),
    taken over: only rows claimed more than `lease_s` ago (a younger one may be running in
    another worker right now), each taken by one caller (its claim time moves on)."""
    now = utcnow()
    cutoff = now - timedelta(seconds=lease_s)
    rows = session.scalars(
        select(RoutineFiring)
        .where(RoutineFiring.routine_id == routine_id, RoutineFiring.outcome == "pending")
        .where(RoutineFiring.recorded_at < cutoff)
        .order_by(RoutineFiring.due_at)
    ).all()
    taken = []
    for row in rows:
        moved = session.execute(
            update(RoutineFiring)
            .where(
                RoutineFiring.id == row.id,
                RoutineFiring.outcome == "pending",
                RoutineFiring.recorded_at < cutoff,
            )
            .values(recorded_at=now)
        )
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            taken.append(Firing(row.due_at, row.outcome, row.reason, row.missed, row.late))
    return taken


def finish(
    session: Session,
    routine_id: str,
    due: datetime,
    outcome: str,
    *,
    reason: str = "",
    message_id: str | None = None,
) -> None:
    """Set a claimed firing's outcome: ran (with its message), skipped or failed (why); only
    while it is pending (a firing that has an outcome keeps it)."""
    session.execute(
        update(RoutineFiring)
        .where(
            RoutineFiring.routine_id == routine_id,
            RoutineFiring.due_at == due,
            RoutineFiring.outcome == "pending",
        )
        .values(outcome=outcome, reason=reason, message_id=message_id, recorded_at=utcnow())
    )


def firings_of(session: Session, routine_id: str, limit: int = 50) -> list[FiringInfo]:
    """The routine's newest firings first, each with the turn its message woke (if any yet)."""
    rows = session.execute(
        select(RoutineFiring, Message.turn_id)
        .outerjoin(Message, Message.id == RoutineFiring.message_id)
        .where(RoutineFiring.routine_id == routine_id)
        .order_by(RoutineFiring.due_at.desc())
        .limit(limit)
    ).all()
    return [view_of(FiringInfo, row, turn_id=turn_id) for row, turn_id in rows]


def outcome_counts(session: Session, routine_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per routine: how many of its due times ran, were skipped, failed or are pending."""
    counts: dict[str, dict[str, int]] = {
        rid: {"ran": 0, "skipped": 0, "failed": 0, "pending": 0} for rid in routine_ids
    }
    if not routine_ids:
        return counts
    found = session.execute(
        select(RoutineFiring.routine_id, RoutineFiring.outcome, func.count())
        .where(RoutineFiring.routine_id.in_(list(routine_ids)))
        .group_by(RoutineFiring.routine_id, RoutineFiring.outcome)
    ).all()
    for routine_id, outcome, count in found:
        counts[routine_id][outcome] = count
    return counts


@dataclass(frozen=True)
class RunToCheck:
    """A routine's run whose message a turn took, with what done means for it."""

    routine_id: str
    owner_id: str
    due: datetime
    done_when: DoneWhen


def mark_not_done(session: Session, routine_id: str, due: datetime, reason: str) -> None:
    """A run that ended without what done means: failed, why, and its message kept."""
    session.execute(
        update(RoutineFiring)
        .where(
            RoutineFiring.routine_id == routine_id,
            RoutineFiring.due_at == due,
            RoutineFiring.outcome == "ran",
        )
        .values(outcome="failed", reason=reason, recorded_at=utcnow())
    )


def runs_taken_by(session: Session, turn_id: str) -> list[RunToCheck]:
    """The runs (fired, with a postcondition) whose message the turn took."""
    rows = session.execute(_RUNS_TAKEN_BY, {"turn_id": turn_id}).all()
    return [
        RunToCheck(routine_id, owner_id, due, DoneWhen.model_validate(done_when))
        for routine_id, owner_id, due, done_when in rows
        if done_when
    ]


# Prebuilt: every turn's finish runs it.
_RUNS_TAKEN_BY = (
    select(RoutineFiring.routine_id, Routine.owner_id, RoutineFiring.due_at, Routine.done_when)
    .join(Routine, Routine.id == RoutineFiring.routine_id)
    .join(Message, Message.id == RoutineFiring.message_id)
    .where(
        Message.turn_id == bindparam("turn_id"),
        RoutineFiring.outcome == "ran",
        Routine.done_when.is_not(None),
    )
)


def sent_by(session: Session, turn_id: str) -> bool:
    """Whether the turn sent its owner a message (a question asking for approval is not one)."""
    metas = session.scalars(
        select(Message.meta).where(Message.turn_id == turn_id, Message.role == "agent")
    )
    return any(((meta or {}).get("controls") or {}).get("ask") != "approval" for meta in metas)


def previous_firing(session: Session, routine_id: str, due: datetime) -> Firing | None:
    """The routine's newest due time before `due` that has an outcome."""
    row = session.scalars(
        select(RoutineFiring)
        .where(RoutineFiring.routine_id == routine_id, RoutineFiring.due_at < due)
        .order_by(RoutineFiring.due_at.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return Firing(row.due_at, row.outcome, row.reason, row.missed, row.late)
