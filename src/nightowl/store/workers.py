"""Worker heartbeats, so a live process can take over the turns of a dead one."""

from __future__ import annotations

import os
import socket
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nightowl.store.tables import Worker, utcnow


def beat(session: Session, executor_id: str) -> None:
    """Record that this worker is alive (creating or reviving its row)."""
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
    else:
        if row.status != "alive" or row.pid != os.getpid():
            row.started_at = now
        row.status = "alive"
        row.pid = os.getpid()
        row.heartbeat_at = now
        row.recovered_by = None
        row.recovered_at = None
    session.flush()


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
