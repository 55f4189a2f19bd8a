"""Memory's garbage collection: notes expire; facts and work-log entries unused for a while
are archived (out of the prompt, still searchable); what keeps being used stays."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from nightowl.memory.notes import delete_expired
from nightowl.store.database import Database
from nightowl.store.memory_tables import MemoryFact, WorkLogEntry
from nightowl.store.memory_versions import Author, record, snapshot
from nightowl.store.tables import utcnow

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Collected:
    """What one collection did."""

    notes_expired: int
    facts_archived: int
    log_archived: int


def collect(session: Session, archive_days: float, now: datetime | None = None) -> Collected:
    """Delete expired notes; archive facts and log entries not used for `archive_days`
    (never used: counted from when they were written)."""
    moment = now or utcnow()
    cutoff = moment - timedelta(days=archive_days)
    notes = delete_expired(session, moment)
    stale = session.scalars(
        select(MemoryFact).where(
            MemoryFact.archived_at.is_(None),
            func.coalesce(MemoryFact.last_used_at, MemoryFact.updated_at) < cutoff,
        )
    ).all()
    for fact in stale:  # each archive is a version (a revert brings the fact back)
        before = snapshot(fact)
        fact.archived_at = moment
        session.flush()
        by = Author("upkeep", trust="owner")
        record(session, "fact", fact.id, fact.user_id, "archived", before, snapshot(fact), by)
    entries = session.execute(
        update(WorkLogEntry)
        .where(
            WorkLogEntry.archived_at.is_(None),
            func.coalesce(WorkLogEntry.last_used_at, WorkLogEntry.created_at) < cutoff,
        )
        .values(archived_at=moment)
    )
    return Collected(
        notes,
        len(stale),
        int(entries.rowcount or 0),  # type: ignore[attr-defined]
    )


async def collect_forever(database: Database, archive_days: float, interval_s: float) -> None:
    """Collect now and then every `interval_s`, until cancelled."""
    while True:
        try:

            def once() -> Collected:
                with database.write() as session:
                    return collect(session, archive_days)

            done = await asyncio.to_thread(once)
            if done.notes_expired or done.facts_archived or done.log_archived:
                log.info("memory collected", extra=done.__dict__)
        except Exception:
            log.exception("memory collection failed; will retry")
        await asyncio.sleep(interval_s)
