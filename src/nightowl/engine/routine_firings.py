"""Every due time of a routine accounted for (the policy is harness/firings.py).

A DBOS firing runs its own due time and the routine's older due times that passed unfired
(older than a grace period: a stalled scheduler, a clock that jumped); at start-up each active
routine catches up the due times that passed while the server was down, by its `catch_up`
policy. Each due time is claimed once in `routine_firings` before it runs, and its message is
keyed by the routine and the due time, so restarts, two workers and clock jumps neither lose
nor double one.

A routine whose budget (or its conversation's, or its owner's) is spent for the day is
`skipped: budget: …` before anything runs, and one that skips quiet hours (`quiet_hours:
skip`) is `skipped: quiet hours …` when its owner's quiet hours hold at the firing. A routine
with a watch checks it next, without the model (engine/watch_checks.py): nothing changed is
`skipped: nothing changed` and no message at all; a change wakes the conversation with the
routine's notice and, as outside text, what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, time

from nightowl.engine.watch_checks import WatchChecks, WatchFailed
from nightowl.harness.done_when import NOT_DONE, previous_not_done
from nightowl.harness.firings import GRACE, DueTimes, Firing, due_times, plan
from nightowl.harness.guard import GuardLimits, budget_skip
from nightowl.harness.watches import judge
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.database import Database
from nightowl.store.errors import NotFound, StoreError
from nightowl.store.push import quiet_until, settings_of
from nightowl.store.routine_firings import claim, finish, left_pending, previous_firing
from nightowl.store.routines import (
    RoutineInfo,
    get_routine,
    list_routines,
    record_fired,
    remember_watch,
    routine_trust,
    watch_state_of,
)
from nightowl.store.tables import utcnow
from nightowl.store.usage import routine_spending_today

log = logging.getLogger(__name__)


class RoutineFirings:
    """Turns a routine's due times into messages for its conversation, each exactly once."""

    def __init__(
        self,
        database: Database,
        router: Router,
        clock: Callable[[], datetime] = utcnow,
        watches: WatchChecks | None = None,
        limits: GuardLimits | None = None,
    ) -> None:
        self._database = database
        self._router = router
        self._clock = clock
        self._watches = watches
        self._limits = limits

    def fire_due(self, routine_id: str, due: datetime | None) -> int:
        """Account for the routine's due times up to `due` (the one at hand; None: catch up
        the ones that passed unfired until now) and run those to run; how many ran."""
        now = self._clock()
        try:
            with self._database.write() as session:
                routine = get_routine(session, routine_id)
                if routine.status != "active":  # paused or never approved: never fires
                    if due is not None and routine.status == "paused":
                        claim(session, routine.id, [Firing(due, "skipped", "paused")])
                    return 0
                start = routine.accounted_until or routine.created_at
                end = now if due is None else min(due - GRACE, now)
                missed = due_times(routine.cron, routine.timezone, start, end)
                planned = plan(missed if end > start else DueTimes(()), due, routine.catch_up)
                to_run = claim(session, routine.id, planned)
                # Runs cut short between their claim and their message (a process stopped).
                to_run += left_pending(session, routine.id)
                trust = routine_trust(session, routine)
        except NotFound:
            return 0
        ran = sum(self._run_or_fail(routine, firing, trust) for firing in sorted(to_run, key=_due))
        if ran:
            with self._database.write() as session:
                record_fired(session, routine.id)
        return ran

    def _run_or_fail(self, routine: RoutineInfo, firing: Firing, trust: str) -> bool:
        """Run one claimed firing; anything unforeseen fails it with why (never left pending)."""
        try:
            return self._run(routine, firing, trust)
        except Exception as error:
            log.exception("routine firing broke", extra={"routine_id": routine.id})
            return self._failed(routine, firing, f"{type(error).__name__}: {error}")

    def _run(self, routine: RoutineInfo, firing: Firing, trust: str) -> bool:
        due = firing.due.isoformat()
        # Over budget, a turn would stop at its first model call: none is started.
        skip = self._over_budget(routine) or self._quiet(routine)
        if skip is not None:
            with self._database.write() as session:
                finish(session, routine.id, firing.due, "skipped", reason=skip)
            return False
        change, state = "", None
        if routine.watch is not None and self._watches is not None:
            with self._database.read() as session:
                previous = watch_state_of(session, routine.id)
            try:
                seen = self._watches.see(routine.owner_id, routine.watch, previous)
            except WatchFailed as error:
                return self._failed(routine, firing, f"the watch failed: {error}")
            verdict = judge(routine.watch, previous, seen)
            state = verdict.state
            if not verdict.changed:  # no message, no turn, no model tokens
                with self._database.write() as session:
                    finish(session, routine.id, firing.due, "skipped", reason=verdict.what)
                    if state is not None:
                        remember_watch(session, routine.id, state)
                return False
            change = f"What changed in {routine.watch.describe()}:\n{verdict.what}"
        notice = f"Routine '{routine.name}' ({due}): {routine.prompt}{firing.notice()}"
        if routine.done_when is not None:
            with self._database.read() as session:
                before = previous_firing(session, routine.id, firing.due)
            if before and before.outcome == "failed" and before.reason.startswith(NOT_DONE):
                notice += previous_not_done(before.due.isoformat(), before.reason)
        if change:
            notice += " [Its watch saw a change: the next message says what.]"
        notice_message = IncomingMessage(
            source="routine",
            idempotency_key=f"{routine.id}:{due}",
            conversation_id=routine.conversation_id,
            text=notice,
            # The least trusted of the routine's own trust (one proposed in a turn that read
            # outside text fires as outside text) and its owner's role.
            trust=trust,
            priority=Priority.ROUTINE,
            role="notice",
        )
        try:
            if change:  # what a page, a file or a delivery says is outside text
                change_message = IncomingMessage(
                    source="watch",
                    idempotency_key=f"{routine.id}:{due}",
                    conversation_id=routine.conversation_id,
                    text=change,
                    trust="untrusted",
                    priority=Priority.ROUTINE,
                )
                # Stored together: the turn that wakes sees the notice and the change.
                accepted, _ = self._router.accept_together([notice_message, change_message])
            else:
                accepted = self._router.accept(notice_message)
        except StoreError as error:
            return self._failed(routine, firing, str(error))
        with self._database.write() as session:
            finish(session, routine.id, firing.due, "ran", message_id=accepted.message.id)
            if state is not None:
                remember_watch(session, routine.id, state)
        return True

    def _over_budget(self, routine: RoutineInfo) -> str | None:
        """Why the routine may not spend today (its own, its conversation's or its owner's
        daily budget is spent), or None."""
        if self._limits is None:
            return None
        now = self._clock()
        midnight = datetime.combine(now.date(), time.min, tzinfo=now.tzinfo)
        with self._database.read() as session:
            spent = routine_spending_today(session, routine.id, routine.conversation_id, midnight)
        return budget_skip(self._limits, spent)

    def _quiet(self, routine: RoutineInfo) -> str | None:
        """Why a routine that skips quiet hours does not run now (its owner's quiet hours
        hold, judged at the firing, so a late catch-up after them runs), or None."""
        if routine.quiet_hours != "skip":
            return None
        with self._database.read() as session:
            settings = settings_of(session, routine.owner_id)
        ends = quiet_until(settings, self._clock())
        if ends is None:
            return None
        return f"quiet hours: until {ends.strftime('%H:%M')} {settings.timezone}"

    def _failed(self, routine: RoutineInfo, firing: Firing, reason: str) -> bool:
        with self._database.write() as session:
            finish(session, routine.id, firing.due, "failed", reason=reason[:500])
        log.warning(
            "routine firing failed", extra={"routine_id": routine.id, "due": firing.due.isoformat()}
        )
        return False

    def catch_up(self) -> int:
        """At start-up: every active routine accounts for the due times that passed while the
        server was down (by its catch-up policy); how many firings ran."""
        with self._database.read() as session:
            routines = [r for r in list_routines(session) if r.status == "active"]
        ran = 0
        for routine in routines:
            try:
                ran += self.fire_due(routine.id, None)
            except Exception:
                log.exception("could not catch up a routine", extra={"routine_id": routine.id})
        return ran


def _due(firing: Firing) -> datetime:
    return firing.due
