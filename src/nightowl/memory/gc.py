"""Memory's garbage collection: notes expire; facts and work-log entries unused for a while
are archived (out of the prompt, still searchable); what keeps being used stays."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from nightowl.store.database import Database
from nightowl.store.memory.facts import archive_unused_facts
from nightowl.store.memory.notes import delete_expired
from nightowl.store.memory.worklog import archive_unused_entries
from nightowl.store.memory_versions import Author
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
    # Each archived fact is a version (a revert brings it back).
    facts = archive_unused_facts(session, cutoff, moment, Author("upkeep", trust="owner"))
    entries = archive_unused_entries(session, cutoff, moment)
    return Collected(notes, facts, entries)


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
