"""Routines as DBOS schedules: one per active routine; a firing wakes its conversation."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from dbos import DBOS

from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.outages import outlast
from nightowl.store.routines import (
    RoutineInfo,
    get_routine,
    list_routines,
    record_fired,
    routine_trust,
)

log = logging.getLogger(__name__)


def schedule_name(routine_id: str) -> str:
    """The DBOS schedule of a routine."""
    return f"routine-{routine_id}"


class RoutineSchedules:
    """Keeps one DBOS schedule per active routine, and runs what a firing does."""

    def __init__(self, database: Database, router: Callable[[], Router]) -> None:
        self._database = database
        self._router = router

        @DBOS.step(name="nightowl.fire_routine")
        async def fire(routine_id: str, scheduled_for: str) -> bool:
            # Again whole while the database is away: the firing's message is keyed by the
            # routine and the time it was due, so it is stored once.
            return await outlast(self._fire, routine_id, scheduled_for)

        @DBOS.workflow(name="nightowl.routine")
        async def routine(scheduled_time: datetime, routine_id: Any) -> None:
            await fire(str(routine_id), scheduled_time.isoformat())

        self._workflow = routine

    def _fire(self, routine_id: str, scheduled_for: str) -> bool:
        try:
            with self._database.read() as session:
                routine = get_routine(session, routine_id)
                trust = routine_trust(session, routine)
        except NotFound:
            return False
        if routine.status != "active":  # paused or never approved: never fires
            return False
        self._router().accept(
            IncomingMessage(
                source="routine",
                idempotency_key=f"{routine.id}:{scheduled_for}",
                conversation_id=routine.conversation_id,
                text=f"Routine '{routine.name}' ({scheduled_for}): {routine.prompt}",
                # The least trusted of the routine's own trust (one proposed in a turn that
                # read outside text fires as outside text) and its owner's role.
                trust=trust,
                priority=Priority.ROUTINE,
                role="notice",
            )
        )
        with self._database.write() as session:
            record_fired(session, routine.id)
        return True

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
