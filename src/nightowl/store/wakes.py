"""What will wake a conversation: its pending timers and active routines."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.tables import Routine, Timer


def record_timer(
    session: Session, timer_id: str, conversation_id: str, due_at: datetime, note: str
) -> None:
    """Remember a pending timer (once per id: a re-run step does not add it twice)."""
    if session.get(Timer, timer_id) is None:
        session.add(Timer(id=timer_id, conversation_id=conversation_id, due_at=due_at, note=note))


def upcoming_wakes(session: Session, conversation_id: str, now: datetime) -> list[datetime]:
    """When pending timers and active routines will next wake the conversation."""
    wakes = list(
        session.scalars(
            select(Timer.due_at).where(
                Timer.conversation_id == conversation_id,
                Timer.due_at >= now,
            )
        )
    )
    routines = session.execute(
        select(Routine.cron, Routine.timezone).where(
            Routine.conversation_id == conversation_id, Routine.status == "active"
        )
    ).all()
    for cron, zone in routines:
        local_now = now.astimezone(ZoneInfo(zone))
        following = croniter(cron, local_now, second_at_beginning=True).get_next(datetime)
        wakes.append(following.astimezone(now.tzinfo))
    return wakes
