"""Routines as DBOS schedules: one per active routine; a firing wakes its conversation
through engine/routine_firings.py, which accounts for every due time."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from dbos import DBOS

from nightowl.engine.routine_firings import RoutineFirings
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.guard import GuardLimits
from nightowl.router.router import Router
from nightowl.store.database import Database
from nightowl.store.outages import outlast
from nightowl.store.routines import RoutineInfo, list_routines

log = logging.getLogger(__name__)


def schedule_name(routine_id: str) -> str:
    """The DBOS schedule of a routine."""
    return f"routine-{routine_id}"


class RoutineSchedules:
    """Keeps one DBOS schedule per active routine, and runs what a firing does."""

    def __init__(
        self,
        database: Database,
        router: Router,
        watches: WatchChecks | None = None,
        limits: GuardLimits | None = None,
    ) -> None:
        self._database = database
        self.firings = RoutineFirings(database, router, watches=watches, limits=limits)

        @DBOS.step(name="nightowl.fire_routine")
        async def fire(routine_id: str, scheduled_for: str) -> bool:
            # Again whole while the database is away: the due time is claimed once and its
            # message is keyed by the routine and the due time, so it is stored once.
            return await outlast(self._fire, routine_id, scheduled_for)

        @DBOS.workflow(name="nightowl.routine")
        async def routine(scheduled_time: datetime, routine_id: Any) -> None:
            await fire(str(routine_id), scheduled_time.isoformat())

        self._workflow = routine

    def _fire(self, routine_id: str, scheduled_for: str) -> bool:
        due = datetime.fromisoformat(scheduled_for)
        due = due.replace(tzinfo=UTC) if due.tzinfo is None else due.astimezone(UTC)
        return self.firings.fire_due(routine_id, due) > 0

    def apply(self, routine: RoutineInfo) -> None:
        """Make DBOS's schedule match the routine's status (create, pause, resume)."""
        name = schedule_name(routine.id)
        existing = DBOS.get_schedule(name)
        if routine.status == "pending_approval":
            if existing is not None:
                DBOS.delete_schedule(name)
            return
        if existing is None:
            DBOS.create_schedule(
                schedule_name=name,
                workflow_fn=self._workflow,
                schedule=routine.cron,
                context=routine.id,
                cron_timezone=routine.timezone,
            )
        if routine.status == "paused":
            DBOS.pause_schedule(name)
        else:
            DBOS.resume_schedule(name)

    def remove(self, routine_id: str) -> None:
        """Delete the routine's schedule (a no-op when there is none)."""
        DBOS.delete_schedule(schedule_name(routine_id))

    def reconcile(self) -> None:
        """At start-up: every routine's schedule matches its stored status."""
        with self._database.read() as session:
            routines = list_routines(session)
        for routine in routines:
            try:
                self.apply(routine)
            except Exception:
                log.exception("could not schedule routine", extra={"routine_id": routine.id})
