"""Worker heartbeats, so a live process can take over the turns of a dead one."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from nightowl.store.tables import Worker, utcnow


def beat(session: Session, executor_id: str, first: bool = True) -> str | None:
    """Record that this worker is alive (creating its row, or reviving it on a start).

    A worker that beat before in this process (`first` False) and finds its row marked dead
    was declared dead while it was alive (its beats came late) and its runs were taken over:
    the row stays dead and the taker's executor id is returned, so the worker stops instead of
    running those runs beside their new owner. None otherwise."""
    now = utcnow()
    row = session.get(Worker, executor_id)
    if row is None:
        session.add(
            Worker(
                executor_id=executor_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                status="alive",
                started_at=now,
                heartbeat_at=now,
            )
        )
    elif row.status == "dead" and not first:
        # Recorded: from now on it stops, and what it still owns may be recovered
        # (`dead_with_pending`) without its dequeuing it again.
        row.heartbeat_at = now
        session.flush()
        return row.recovered_by or "another worker"
    else:
        if row.status != "alive" or row.pid != os.getpid():
            row.started_at = now
        row.status = "alive"
        row.pid = os.getpid()
        row.heartbeat_at = now
        row.recovered_by = None
        row.recovered_at = None
    session.flush()
    return None


def stale_workers(session: Session, older_than: datetime, me: str) -> list[str]:
    """Executor ids of other workers still marked alive whose last heartbeat is too old."""
    return list(
        session.scalars(
            select(Worker.executor_id).where(
                Worker.status == "alive",
                Worker.heartbeat_at < older_than,
                Worker.executor_id != me,
            )
        )
    )


# How long after a worker was declared dead what it still owns is recovered even though it
# never said it stopped (it died for good after a late dequeue).
LONG_DEAD_S = 60.0


def dead_with_pending(session: Session, long_dead_s: float = LONG_DEAD_S) -> list[str]:
    """Executor ids of workers marked dead that still own pending workflows: a worker declared
    dead while alive may dequeue more before it notices and stops, and a claimed row is never
    claimed again. Only once it stopped (its beat after it was declared dead says so,
    `beat`), or `long_dead_s` after it was declared dead (it died for good meanwhile): while it
    still polls the queue it would dequeue what is recovered again, each time one more start
    of the turn (a crash loop's count). PostgreSQL only (DBOS's history shares the database
    there; on SQLite one process runs everything)."""
    if session.connection().dialect.name != "postgresql":
        return []
    found = session.execute(
        text(
            "SELECT DISTINCT w.executor_id FROM workers w"
            " JOIN dbos.workflow_status s ON s.executor_id = w.executor_id"
            " WHERE w.status = 'dead' AND s.status = 'PENDING'"
            " AND (w.heartbeat_at > w.recovered_at OR w.recovered_at < :cutoff)"
        ),
        {"cutoff": utcnow() - timedelta(seconds=long_dead_s)},
    )
    return [row[0] for row in found]


def claim_dead(session: Session, executor_id: str, older_than: datetime, me: str) -> bool:
    """Declare a stale worker dead; exactly one live worker wins the claim."""
    result = session.execute(
        update(Worker)
        .where(
            Worker.executor_id == executor_id,
            Worker.status == "alive",
            Worker.heartbeat_at < older_than,
        )
        .values(status="dead", recovered_by=me, recovered_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))
