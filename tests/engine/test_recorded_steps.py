"""Two executions of one run recording the same step (a worker declared dead while alive,
and the worker that took over): the second's writes roll back and it replays the first's
record (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from nightowl.engine.recorded_steps import recorded_step
from nightowl.store.database import Database
from nightowl.store.step_results import StepTaken, record_result, recorded_result
from nightowl.store.tables import Worker, utcnow
from nightowl.store.workers import beat


def test_a_step_recorded_twice_keeps_the_first_record_and_none_of_the_second_writes(
    database: Database,
) -> None:
    with database.write() as session:
        record_result(session, "run-1:step-1", {"reply": "first"})
    with pytest.raises(StepTaken), database.write() as session:
        # The second execution's own write in the same transaction must not survive.
        beat(session, "written-by-the-second")
        record_result(session, "run-1:step-1", {"reply": "second"})
    with database.read() as session:
        kept = recorded_result(session, "run-1:step-1")
        written = session.scalar(
            select(func.count()).where(Worker.executor_id == "written-by-the-second")
        )
    assert kept is not None and kept.value == {"reply": "first"}
    assert written == 0


def test_a_recorded_step_that_lost_the_race_returns_the_winners_record(
    database: Database,
) -> None:
    runs = []

    @recorded_step()
    async def step(key: str) -> object:
        def work() -> object:
            with database.read() as session:
                earlier = recorded_result(session, key)
            if earlier is not None:  # a replay returns the record
                runs.append("replayed")
                return earlier.value
            if not runs:  # meanwhile, the other execution records the step first
                with database.write() as other:
                    record_result(other, key, "the other's")
            runs.append("ran")
            with database.write() as session:
                record_result(session, key, "mine")
            return "mine"

        return await asyncio.to_thread(work)

    assert asyncio.run(step("run-2:step-1")) == "the other's"
    assert runs == ["ran", "replayed"]


def test_a_worker_row_marked_dead_while_this_process_beat_is_not_revived(
    database: Database,
) -> None:
    with database.write() as session:
        assert beat(session, "w1") is None  # a start
    with database.write() as session:
        row = session.get(Worker, "w1")
        assert row is not None
        row.status, row.recovered_by, row.recovered_at = "dead", "w2", utcnow()
    with database.write() as session:
        assert beat(session, "w1", first=False) == "w2"  # declared dead while alive
    with database.read() as session:
        row = session.get(Worker, "w1")
        assert row is not None and row.status == "dead"
    with database.write() as session:
        assert beat(session, "w1", first=True) is None  # a restart rejoins
    with database.read() as session:
        row = session.get(Worker, "w1")
        assert row is not None and (row.status, row.recovered_by) == ("alive", None)
