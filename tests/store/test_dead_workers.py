"""What a worker declared dead still owns is recovered only once it stopped (its beat after
it was declared dead says so) or long after: while it still polls the queue it would dequeue
what is recovered again, each time one more start of the turn, until the turn is parked as a
crash loop (seen in the split-brain test under full-suite load)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from nightowl.store.database import Database
from nightowl.store.tables import Worker, utcnow
from nightowl.store.workers import LONG_DEAD_S, beat, dead_with_pending


def _declare_dead(database: Database, executor_id: str, ago_s: float) -> None:
    with database.write() as session:
        row = session.get(Worker, executor_id)
        assert row is not None
        row.status, row.recovered_by = "dead", "taker"
        row.recovered_at = utcnow() - timedelta(seconds=ago_s)
        row.heartbeat_at = row.recovered_at - timedelta(seconds=20)


def test_a_dead_workers_workflows_wait_until_it_stopped(database: Database) -> None:
    with database.write() as session:
        for worker in ("late", "gone"):
            beat(session, worker)
        # DBOS's table, as far as the query reads it (a copy of the test template has the
        # real one already).
        if database.is_postgres:
            session.execute(text("CREATE SCHEMA IF NOT EXISTS dbos"))
            session.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS dbos.workflow_status"
                    " (workflow_uuid TEXT PRIMARY KEY, executor_id TEXT, status TEXT)"
                )
            )
            session.execute(
                text(
                    "INSERT INTO dbos.workflow_status (workflow_uuid, executor_id, status)"
                    " VALUES ('w1', 'late', 'PENDING'), ('w2', 'gone', 'PENDING')"
                )
            )
    _declare_dead(database, "late", 1)  # declared dead a moment ago, still polling
    _declare_dead(database, "gone", LONG_DEAD_S + 5)  # never heard of since
    with database.read() as session:
        before = dead_with_pending(session)
    with database.write() as session:
        assert beat(session, "late", first=False) == "taker"  # it learns it and stops
    with database.read() as session:
        after = dead_with_pending(session)
    if database.is_postgres:
        assert before == ["gone"]
        assert sorted(after) == ["gone", "late"]
    else:  # one process runs everything: nothing to recover from another
        assert before == after == []
