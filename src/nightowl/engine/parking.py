"""No crash loops: a turn whose process keeps dying while it runs is parked, not resumed forever.

Every start of a turn's workflow (its first run and each recovery) is counted in the app store
before anything else runs; a model call that completes resets the count, and so does a start
while the turn waited for the owner's answer (a process that dies then did not die running it).
Past `max_recoveries` starts in a row without progress, the turn is marked failed with the
reason and the owner is told once; the workflow ends instead of running the step that keeps
killing its process. (DBOS's own limit counts every start, restarts during a week-long wait for
an answer included, so it is turned off for turns.)
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from nightowl.metrics import Metrics
from nightowl.store.database import Database
from nightowl.store.outbox import deliver_to_user
from nightowl.store.turns import count_start, park_turn

log = logging.getLogger(__name__)


def parked_notice(deaths: int) -> str:
    """What the owner reads about a parked turn."""
    return (
        f"I stopped working on this: the server process died {deaths} times in a row while it "
        "ran, so I will not try it again on my own. `nightowl doctor` and the server's log may "
        "say why. Send a message to try again."
    )


class TurnParking:
    """Counts each start of a turn and parks a turn that keeps killing its process."""

    def __init__(self, database: Database, metrics: Metrics, max_recoveries: int) -> None:
        self._database = database
        self._metrics = metrics
        self._max_recoveries = max_recoveries

    def start_or_park(self, turn_id: str) -> bool:
        """Count this start; True when the turn is parked and must not run."""
        with self._database.write() as session:
            parked = self.count_or_park(session, turn_id)
        if parked:
            self.report_parked(turn_id)
        return parked

    def count_or_park(self, session: Session, turn_id: str) -> bool:
        """`start_or_park` in the caller's transaction (call `report_parked` after it when
        True): a run that starts with other writes counts its start with them."""
        starts = count_start(session, turn_id)
        if starts <= self._max_recoveries:
            return False
        deaths = starts - 1
        conversation_id = park_turn(
            session, turn_id, f"parked: its process died {deaths} times in a row while it ran"
        )
        if conversation_id is not None:
            deliver_to_user(
                session,
                conversation_id,
                key=f"parked:{turn_id}",
                body=parked_notice(deaths),
                turn_id=turn_id,
                role="notice",
                meta={"important": True},
            )
        return True

    def report_parked(self, turn_id: str) -> None:
        """Count and log a parked run (after its transaction committed)."""
        self._metrics.turns_finished.labels(outcome="parked").inc()
        log.error("turn parked after repeated crashes", extra={"turn_id": turn_id})
